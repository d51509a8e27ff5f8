"""The image modality: every name of the interface (stages/lib/modality/__init__.py INTERFACE),
from the parts that hold them. What a task whose inputs are images gets as `Task.modality`.

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
    FIELDS, INSPECT_ERRORS, LETTERBOX, bucket_width, decode, fingerprint, input_shape, input_spec,
    inspect, line_buckets, normalize, normalize_tensor, thumbnail, warmup_input)
from stages.lib.modality.imagefit import choose_shape, header, header_facts  # noqa: F401
from stages.lib.modality.imagegate import CHECKS, check_columns, expectations, reason  # noqa: F401
from stages.lib.modality.imageserve import read, read_drafted, read_header, sized  # noqa: F401
