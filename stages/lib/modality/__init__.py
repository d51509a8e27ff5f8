"""The modality layer: everything that knows what kind of file a sample is (an image, a sound).

A modality is a module under stages/lib/modality/ that provides every name of INTERFACE. The
stages and the rest of stages/lib never open, measure or convert an input themselves: they ask
the task's modality (`Task.modality`, picked by `Task.modality_name`), so a task whose inputs
are not images brings its own modality, not `if` chains in the stages. Stages import nothing
from this package but `get`.

INTERFACE, by pipeline step (image: stages/lib/modality/image.py and its parts; audio:
stages/lib/modality/audio.py and its parts). Spec is the modality's input spec (imagespec.py
ImageSpec, audiospec.py AudioSpec): a frozen dataclass with `from_meta(meta)` (the recipe
meta.json and a model's metadata store under stages/lib/modality/spec.py's keys) and `shape`;
the functions that decode take it, never its fields one by one. LIMIT: the params key of the
input limit (validate.max_pixels, validate.max_seconds) ingest passes to inspect.

- ingest: FIELDS (the manifest columns `inspect` fills, in order), INSPECT_ERRORS (the
  error kinds it writes), inspect(source, limit) (header facts, a full decode check and the
  fingerprint of one file; nothing decoded past `limit`, the params' LIMIT).
- validate: CHECKS ({check: (kind, description)}: the per-file checks of the modality, blocking
  first), check_columns(rows, ok, p), expectations(p) and reason(check, row, p) (the checks'
  columns, great_expectations expectations and messages).
- validate, split: fingerprint(row) (an int of 64 bits whose Hamming distance says how alike
  two files are, or None where it says nothing).
- init, prepare: header(path) (what init shows of a file and Task.fit_prepare reads),
  FIT_HEADERS (how many files' headers init reads for Task.fit_prepare, evenly spread; 0:
  every file, where a fit is a bound the gate enforces on each file),
  header_facts(path) (what prepare's auto settings read from a header), choose_shape(p,
  sides, colour, total) (the fit settings: the stored size and channels, with a line each
  saying why), given_size(p) (the stored size prepare's params give, or auto),
  stored(size, channels, letterbox) (the Spec of prepare's resolved settings),
  input_shape(spec) (one stored sample), decode(path, spec, facts, sizes) (one file as stored
  model input).
- train, evaluate, export, predict, serve: normalize(batch, mean, std) (stored samples to
  model input), input_spec(meta) (one model input's shape), augment(x, p, seed) (the default
  augmentation of one model input); optional, outside INTERFACE: augment_batch(x, p, seeds)
  (the same as batched tensor ops on the batch's device; without it a task augments per
  sample).
- predict, serve: read(src, spec, limit[, draft]) (the guarded decode: a
  modality.errors.BadInput naming what is wrong; draft, after read_header: what it chose),
  read_header(src, spec, limit, budget) (the decode's cost, and a reduced decode or None,
  before decoding), sized(array, source_size), warmup_input(spec)
  (an input the model can run on before any request).
- train, export, predict: recipe_keys(meta) (the stored recipe's keys: what a model carries
  of meta.json), shape_of(meta) (what its stored samples look like: evaluate's comparison).
- image only (asked where the spec has them): LETTERBOX, line_buckets, bucket_width
  (stages/lib/modality/image.py).
- evaluate's plots, the reports: thumbnail(ax, sample) (one stored sample drawn on a
  matplotlib axis), WORDS ({"item", "items"}: what the pages call inputs), describe(meta)
  (the stored input in words), ONLY_KEYS (the params only this modality's tasks read: another
  modality's run report leaves them out), CHANNELS (the prepare.channels values its tasks
  take unless a task narrows them), META_LABELS ({stored key: what the reports call it}).
"""
import importlib

DEFAULT = "image"
AUDIO = "audio"  # the sound files' modality (params.py marks its own keys with this name)
MODALITIES = {DEFAULT: "stages.lib.modality.image",  # name -> module
              AUDIO: "stages.lib.modality.audio"}
INTERFACE = (
    "Spec", "LIMIT",
    "FIELDS", "INSPECT_ERRORS", "inspect",
    "CHECKS", "check_columns", "expectations", "reason",
    "fingerprint",
    "header", "FIT_HEADERS", "header_facts", "choose_shape", "given_size", "stored",
    "input_shape", "decode",
    "normalize", "input_spec", "augment",
    "read", "read_header", "sized", "warmup_input", "recipe_keys", "shape_of",
    "thumbnail", "WORDS", "describe", "ONLY_KEYS", "CHANNELS",
    "META_LABELS",
)


def get(name: str = DEFAULT):
    """The modality module of that name (its module is imported on first use: the image
    modality brings numpy and Pillow)."""
    if name not in MODALITIES:
        raise ValueError(f"unknown modality {name!r}; one of {', '.join(sorted(MODALITIES))}")
    return importlib.import_module(MODALITIES[name])
