"""The audio modality's guarded decode, for predict and serve: any file (a path or an upload)
becomes the model's input or a BadInput naming what is wrong, and nothing over the limits is
decoded.

Limits, checked from the file's size and header before any sample is decoded (and the
checks validate blocks a clip for: zero frames and more than MAX_CHANNELS channels from the
header, NaN or infinite samples after the decode):
- MAX_READ_BYTES (64 MiB) per file (serve's --max-bytes bounds a whole request before this);
- MAX_SECONDS (30 s) of audio, and the limit in seconds the caller passes (predict's and
  serve's --max-seconds, as ingest's validate.max_seconds): a longer clip is refused as
  "too_long" (errors.KINDS: serve's status when no file of a request is usable);
- a sample rate within MIN_RATE..MAX_RATE (4 kHz to 192 kHz), and the resampler's memory is
  counted in the decode cost serve's --max-decode-mb bounds.
The features are audiocore.py's own (`features`), so predict and serve see what prepare
stored, byte for byte.
"""
import io
import os

import numpy as np

from stages.lib.modality.audiogate import MAX_CHANNELS
from stages.lib.modality.errors import BadInput, open_regular

MAX_READ_BYTES = 64 * 2**20
MAX_SECONDS = 30.0
# The sample rates decoded: from telephone audio to studio rates. A rate outside would make the
# resampler's filter (its taps grow with the rate ratio) cost far more than the samples.
MIN_RATE, MAX_RATE = 4000, 192000


class Clip(np.ndarray):
    """A model input that remembers its source's (frames, sample rate)."""

    source_size = None


def sized(features: np.ndarray, size) -> np.ndarray:
    out = features.view(Clip)
    out.source_size = (int(size[0]), int(size[1]))
    return out


def _size_of(src) -> int:
    pos = src.tell()
    src.seek(0, io.SEEK_END)
    n = src.tell()
    src.seek(pos)
    return n


def _header(src, max_seconds: float):
    """(frames, sample rate, channels) from the header; BadInput when it is no sound file, or
    over the limits."""
    import soundfile as sf

    n = _size_of(src)
    if n > MAX_READ_BYTES:
        raise BadInput("too_large", f"sound file of {n} bytes is over the audio limit of "
                                    f"{MAX_READ_BYTES} bytes (MAX_READ_BYTES)")
    if n == 0:
        raise BadInput("corrupt", "empty file: 0 bytes, no sound")
    try:
        info = sf.info(src)
    except Exception as exc:  # libsndfile: not a sound file it knows, or a broken header
        text = str(exc).split(":")[-1].strip() or type(exc).__name__
        raise BadInput("unsupported", f"not a sound file soundfile can read ({text})") from None
    finally:
        src.seek(0)
    frames, rate, ch = int(info.frames), int(info.samplerate), int(info.channels)
    if frames == 0:
        raise BadInput("corrupt", gate_reason("zero_frames", {"format": info.format}))
    if ch > MAX_CHANNELS:
        raise BadInput("corrupt", gate_reason("channels", {"channels": ch}))
    if not MIN_RATE <= rate <= MAX_RATE:
        raise BadInput("corrupt", f"sample rate {rate} Hz: outside {MIN_RATE}..{MAX_RATE} Hz, "
                                  f"the rates predict and serve decode (MIN_RATE, MAX_RATE); "
                                  f"resample the file")
    seconds = frames / rate if rate else 0.0
    if seconds > MAX_SECONDS:
        raise BadInput("too_long", f"clip of {seconds:.1f} s is over the limit of "
                                   f"{MAX_SECONDS:g} s of audio per file (MAX_SECONDS)")
    if max_seconds and seconds > max_seconds:
        raise BadInput("too_long", f"clip of {seconds:.1f} s is over --max-seconds "
                                   f"({max_seconds:g} s), the longest clip decoded")
    return frames, rate, ch


def read(src, spec, limit: float = 0, draft=None):  # noqa: ARG001 - the interface's
    """uint8 n_mels x frames x 1 from a path or a binary file object, as prepare stores it
    (spec: the model's AudioSpec; limit: the longest clip, in seconds, 0 = MAX_SECONDS only;
    draft: read_header's, always None: a clip has no reduced decode);
    raise BadInput naming what is wrong (not a sound file, truncated, over the limits, or one
    of validate's blocking per-file checks: zero frames, NaN or infinite samples, more than
    MAX_CHANNELS channels; the audio gate's own messages)."""
    from stages.lib.modality.audiocore import mono, read_samples, wave_features

    if isinstance(src, (str, os.PathLike)):
        with open_regular(src) as f:
            return read(f, spec, limit)
    _header(src, limit)
    try:
        data, rate, info = read_samples(src)
    except Exception as exc:  # libsndfile's errors, a truncated body
        message = f"cannot decode the sound file: {type(exc).__name__}: {exc}".replace("\n", " ")
        raise BadInput("corrupt", message) from None
    nonfinite = int(data.size - np.count_nonzero(np.isfinite(data)))
    if nonfinite:
        raise BadInput("corrupt", gate_reason("nonfinite", {"nonfinite": nonfinite}))
    x = wave_features(mono(data), rate, spec.settings)
    return sized(x, (info[4], rate))


def gate_reason(check: str, row: dict) -> str:
    """validate's message for one of the audio gate's blocking checks (audiogate.reason), so
    predict, serve and the gate refuse a clip in the same words."""
    from stages.lib.modality.audiogate import reason

    return f"{check}: {reason(check, row, None)} (validate blocks it too)"


def read_header(src, spec, limit: float = 0, budget: int = 0):
    """(decode bytes, None) of a clip from its header: float64 samples of every channel,
    twice (the mono mix and the resample), and the resampler's own memory (its filter table
    and working blocks: audiocore.resample_bytes); BadInput over the limits or the budget.
    (None: a clip has no reduced decode.)"""
    from stages.lib.modality.audiocore import resample_bytes

    frames, rate, ch = _header(src, limit)
    cost = frames * (ch + 2) * 8 + 2**20 + resample_bytes(rate, spec.sample_rate)
    if budget and cost > budget:
        raise BadInput("too_large", f"clip needs about {cost / 2**20:.0f} MiB to decode, over "
                                    f"the decode budget of {budget / 2**20:.0f} MiB")
    return cost, None
