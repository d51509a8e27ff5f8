"""The modality layer: everything that knows what kind of file a sample is (an image, a sound).

A modality is a module under stages/lib/modality/ that provides every name of INTERFACE. The
stages and the rest of stages/lib never open, measure or convert an input themselves: they ask
the task's modality (`Task.modality`, picked by `Task.modality_name`), so a task whose inputs
are not images brings its own modality, not `if` chains in the stages. Stages import nothing
from this package but `get`.

INTERFACE, by pipeline step (image: stages/lib/modality/image.py and its parts; audio:
stages/lib/modality/audio.py and its parts, whose `image_size` is its feature spec):

- ingest: FIELDS (the manifest columns `inspect` fills, in order), INSPECT_ERRORS (the
  error kinds it writes), inspect(source, limit) (header facts, a full decode check and the
  fingerprint of one file; nothing decoded past `limit`, the params' validate.max_pixels).
- validate: CHECKS ({check: (kind, description)}: the per-file checks of the modality, blocking
  first), check_columns(rows, ok, p), expectations(p) and reason(check, row, p) (the checks'
  columns, great_expectations expectations and messages).
- validate, split: fingerprint(row) (an int of 64 bits whose Hamming distance says how alike
  two files are, or None where it says nothing).
- init, prepare: header(path) (what init shows of a file and Task.fit_prepare reads),
  header_facts(path) (what prepare's auto settings read from a header), choose_shape(p,
  sides, colour, total) (the fit settings: size and channels, with a line each saying why),
  input_shape(size, channels) (one stored sample), decode(path, size, channels, letterbox,
  facts, sizes) (one file as stored model input), line_buckets(sizes, size, buckets),
  LETTERBOX (what meta.json records of a letterboxed input).
- train, evaluate, export, predict, serve: normalize(batch, mean, std) (stored samples to
  model input), input_spec(meta) (one model input's shape), augment(x, p, seed) (the default
  augmentation of one model input).
- predict, serve: read(src, size, channels, limit, letterbox) (the guarded decode: a
  modality.errors.BadInput naming what is wrong), read_header(src, channels, limit, budget,
  size) (the decode's cost, before decoding), read_drafted(src, size, channels, draft,
  letterbox), sized(array, source_size), bucket_width(size, buckets, source_size),
  warmup_input(size, channels) (an input the model can run on before any request).
- evaluate's plots, the reports: thumbnail(ax, sample) (one stored sample drawn on a
  matplotlib axis).
"""
import importlib

DEFAULT = "image"
AUDIO = "audio"  # the sound files' modality (params.py marks its own keys with this name)
MODALITIES = {DEFAULT: "stages.lib.modality.image",  # name -> module
              AUDIO: "stages.lib.modality.audio"}
INTERFACE = (
    "FIELDS", "INSPECT_ERRORS", "inspect",
    "CHECKS", "check_columns", "expectations", "reason",
    "fingerprint",
    "header", "header_facts", "choose_shape", "input_shape", "decode", "line_buckets", "LETTERBOX",
    "normalize", "input_spec", "augment",
    "read", "read_header", "read_drafted", "sized", "bucket_width", "warmup_input",
    "thumbnail",
)


def get(name: str = DEFAULT):
    """The modality module of that name (its module is imported on first use: the image
    modality brings numpy and Pillow)."""
    if name not in MODALITIES:
        raise ValueError(f"unknown modality {name!r}; one of {', '.join(sorted(MODALITIES))}")
    return importlib.import_module(MODALITIES[name])
