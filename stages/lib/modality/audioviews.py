"""Views of a stored clip (uint8 n_mels x frames log-mel, as audiocore stores it): its spoken
part played faster or slower, its mel bands moved. The tasks' test-time views (Task.views) are
made of these: speech's confidence (stages/tasks/speech/views.py) and the keyword task's
averaged answer (stages/tasks/audio/views.py). Evaluate (on the stored test shards) and predict
and serve (on a clip read by the same front end) make them with these functions, so they see
the same bytes.
"""
import math

import numpy as np


def spoken_span(clip: np.ndarray) -> tuple[int, int] | None:
    """(first, last) frame of a stored clip (n_mels x frames) with any non-zero band: the part
    the front end did not pad (padding is digital silence, 0 after quantising); None when the
    clip is all silence."""
    frames = np.flatnonzero(clip.any(axis=0))
    return (int(frames[0]), int(frames[-1])) if len(frames) else None


def stretch(clip: np.ndarray, amount: float) -> np.ndarray:
    """One stored clip (n_mels x frames, uint8) with its spoken part played `amount` times as
    fast: resampled (linear interpolation, its first and last frames kept) to
    round(length / amount) frames, at most the clip's frames (a slower view never cuts speech),
    and centred with silence either side, as the front end centres a clip."""
    frames = clip.shape[1]
    span = spoken_span(clip)
    if span is None:
        return clip.copy()
    part = clip[:, span[0]:span[1] + 1].astype(np.float64)
    length = part.shape[1]
    size = max(1, min(frames, int(math.floor(length / amount + 0.5))))
    at = np.arange(size) * ((length - 1) / (size - 1)) if size > 1 else np.zeros(1)
    lo = np.minimum(np.floor(at).astype(np.int64), length - 1)
    hi = np.minimum(lo + 1, length - 1)
    frac = at - lo
    resampled = part[:, lo] * (1.0 - frac) + part[:, hi] * frac
    out = np.zeros_like(clip)
    start = (frames - size) // 2
    out[:, start:start + size] = np.clip(np.rint(resampled), 0, 255).astype(np.uint8)
    return out


def view(batch: np.ndarray, kind: str, amount) -> np.ndarray:
    """A view of a batch of stored clips (uint8 N x n_mels x frames x 1): "speed" plays each
    clip's spoken part `amount` times as fast (stretch); "band" moves every band `amount` mel
    bands up (rolled round)."""
    batch = np.asarray(batch)
    if kind == "band":
        return np.roll(batch, amount, axis=1)
    if kind != "speed":
        raise ValueError(f"unknown view {kind!r}: speed or band")
    return np.stack([stretch(clip[..., 0], amount)[..., None] for clip in batch])


def transforms(views) -> list:
    """Each (kind, amount) of views as a function of a stored batch, in order."""
    return [lambda batch, kind=kind, amount=amount: view(batch, kind, amount)
            for kind, amount in views]
