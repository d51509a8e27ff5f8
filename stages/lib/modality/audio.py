"""The audio modality: every name of the interface (stages/lib/modality/__init__.py INTERFACE),
from the parts that hold them. What a task whose inputs are sound files (WAV, FLAC, OGG, read
with soundfile) gets as `Task.modality`.

- audiocore.py: read and decode (soundfile), mono mix, resample, log-mel features quantised
  to uint8 (a stored sample is a one-channel spectrogram "image"), inspect for ingest, the
  log-mel hash fingerprint, the input's shapes, normalise, the thumbnail.
- audiogate.py: validate's per-file checks (decode, frames, NaN/inf, channels, duration,
  silence, clipping; the sample rate, which a task wires in).
- audiofit.py: prepare's feature settings (image_size: the spec dict) and channels.
- audioaug.py: SpecAugment, the default augmentation, and augment_batch: the same as batched
  tensor ops (what train runs on a GPU).
- audioserve.py: predict's and serve's guarded decode (byte, duration and frame limits).
"""
from stages.lib.modality.audioaug import augment, augment_batch  # noqa: F401
from stages.lib.modality.audiocore import (  # noqa: F401
    FIELDS, INSPECT_ERRORS, LETTERBOX, bucket_width, decode, fingerprint, input_shape, input_spec,
    inspect, line_buckets, normalize, normalize_tensor, thumbnail, warmup_input)
from stages.lib.modality.audiofit import choose_shape, header, header_facts  # noqa: F401
from stages.lib.modality.audiogate import CHECKS, check_columns, expectations, reason  # noqa: F401
from stages.lib.modality.audioserve import read, read_drafted, read_header, sized  # noqa: F401
