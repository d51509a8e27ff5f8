"""The audio modality: every name of the interface (stages/lib/modality/__init__.py INTERFACE),
from the parts that hold them. What a task whose inputs are sound files (WAV, FLAC, OGG, read
with soundfile) gets as `Task.modality`.

- audiospec.py: the input spec (AudioSpec: the log-mel front end, mean and std; prepare.audio),
  its problems, its fit to one's own clips and its input limit in seconds.
- audiocore.py: read and decode (soundfile), mono mix, resample, log-mel features quantised
  to uint8 (a stored sample is a one-channel spectrogram), inspect for ingest, the log-mel
  hash fingerprint, the input's shapes, normalise, the thumbnail.
- audiogate.py: validate's per-file checks (decode, frames, NaN/inf, channels, duration,
  silence, clipping; the sample rate, which a task wires in).
- audiofit.py: prepare's feature settings (prepare.audio) and channels.
- audioaug.py: SpecAugment, the default augmentation, and augment_batch: the same as batched
  tensor ops (what train runs on a GPU).
- audioserve.py: predict's and serve's guarded decode (byte, duration and rate limits).
"""
from stages.lib.modality.audioaug import augment, augment_batch  # noqa: F401
from stages.lib.modality.audiocore import (  # noqa: F401
    FIELDS, INSPECT_ERRORS, decode, fingerprint, input_shape, input_spec, inspect, normalize,
    normalize_tensor, thumbnail, warmup_input)
from stages.lib.modality.audiofit import choose_shape, header, header_facts  # noqa: F401
from stages.lib.modality.audiogate import CHECKS, check_columns, expectations, reason  # noqa: F401
from stages.lib.modality.audioserve import read, read_header, sized  # noqa: F401
from stages.lib.modality.audiospec import LIMIT_KEY as LIMIT  # noqa: F401
from stages.lib.modality.audiospec import AudioSpec
from stages.lib.modality.spec import SIZE, recipe_keys, shape_of  # noqa: F401

Spec = AudioSpec  # the modality's input spec (INTERFACE)


def stored(size, channels: int = 1, letterbox=False) -> AudioSpec:
    """The spec of prepare's resolved settings (a clip is never letterboxed)."""
    return AudioSpec.of(size)

# what the reports call one input and several, and the params only audio tasks read
WORDS = {"item": "clip", "items": "clips"}
FIT_HEADERS = 0  # every clip: a speech fit is the longest clip, which the gate then enforces
CHANNELS = (1, "auto")  # prepare.channels: a spectrogram has one
# the stored recipe's keys as the reports show them (the stored name is every modality's)
META_LABELS = {SIZE: "log-mel settings (prepare.audio)"}
ONLY_KEYS = ("prepare.audio", "validate.min_seconds", "validate.max_seconds",
             "validate.silence_db", "validate.max_clipped")


def describe(meta) -> str:
    """The stored input in words, for the run report's header: "1 s clips at 16000 Hz,
    log-mel 40 bands x 101 frames (n_fft 512, hop 160)"."""
    spec = AudioSpec.from_meta(meta)
    return (f"{spec.seconds:g} s clips at {spec.sample_rate} Hz, log-mel {spec.n_mels} bands x "
            f"{spec.frames} frames (n_fft {spec.n_fft}, hop {spec.hop})")


def given_size(p) -> dict:
    """The stored size prepare's params give (p: the prepare section): prepare.audio's
    settings, defaults filled (never auto)."""
    return AudioSpec.of(p.audio).settings
