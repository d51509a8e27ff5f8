"""The image modality: every name of the interface (stages/lib/modality/__init__.py INTERFACE),
from the parts that hold them. What a task whose inputs are images gets as `Task.modality`.

- imagespec.py: the input spec (ImageSpec: size, channels, letterbox, mean, std, width
  buckets) and the interface's functions that take it (decode, read, read_header...).
- imagecore.py: decode, convert and resize (Pillow), normalise, inspect a file for ingest
  (header facts, a full decode, the perceptual hash), the fingerprint, the input's shapes.
- imagegate.py: validate's per-file checks (format, size, pixel count, mode, bit depth...).
- imagefit.py: prepare's auto size and channels, from the headers.
- imageaug.py: the default augmentation; imagebatch.py: the same as batched tensor ops (optional
  augment_batch, what train runs on a GPU).
- imageserve.py: predict's and serve's guarded decode (pixel limit, decode budget, drafts).
"""
from stages.lib.modality.imageaug import augment  # noqa: F401
from stages.lib.modality.imagebatch import augment_batch  # noqa: F401
from stages.lib.modality.imagecore import (  # noqa: F401
    FIELDS, INSPECT_ERRORS, LETTERBOX, bucket_width, fingerprint, input_spec, inspect,
    line_buckets, normalize, normalize_tensor, thumbnail)
from stages.lib.modality.imagefit import choose_shape, header, header_facts  # noqa: F401
from stages.lib.modality.imagegate import CHECKS, check_columns, expectations, reason  # noqa: F401
from stages.lib.modality.imageserve import sized  # noqa: F401
from stages.lib.modality.imagespec import (  # noqa: F401
    LIMIT, ImageSpec, decode, input_shape, read, read_header, stored, warmup_input)

from stages.lib.modality.spec import recipe_keys, shape_of  # noqa: F401,E402

Spec = ImageSpec  # the modality's input spec (INTERFACE)
# image only, outside INTERFACE (asked where the spec has them): LETTERBOX (what meta.json
# records of a letterboxed input), line_buckets and bucket_width (text lines' width buckets)

# what the reports call one input and several, and the params only image tasks read (another
# modality's run report leaves them out)
WORDS = {"item": "image", "items": "images"}
FIT_HEADERS = 2000  # init's fits are shares and medians: an even spread of headers will do
CHANNELS = (1, 3, "auto")  # prepare.channels an image task takes (a task may narrow them)
META_LABELS: dict = {}  # the stored recipe's keys as the reports show them: as stored
ONLY_KEYS = ("prepare.image_size", "prepare.letterbox", "prepare.height", "prepare.width",
             "prepare.width_buckets", "validate.min_side", "validate.max_pixels",
             "validate.formats")


def describe(meta) -> str:
    """The stored input in words, for the run report's header: "16px images"."""
    return f"{meta.get('image_size', '?')}px images"


def given_size(p) -> object:
    """The stored size prepare's params give (p: the prepare section): prepare.image_size,
    auto or pixels per side."""
    return p.image_size
