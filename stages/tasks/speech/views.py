"""Test-time views: the confidence a lexicon-decoded speech model answers. Besides the clip, the
model reads four nudged copies of its stored log-mel (VIEWS): its spoken part played 0.9x and
1.1x as fast, and its mel bands moved one up and one down. A clip the model truly hears gives the
same text under every nudge; a voice it has not learned tends to fall apart under one of them.

The confidence is the geometric mean over the clip and its views of P(text | view), the exact
CTC probability of the clip's answer (ctc.text_logprob), a view whose own lexicon answer differs
counting as exp(DISAGREE): one disagreeing view takes the confidence to about 0. On the speech
sample's Flite clips (a synthesizer nothing trains on) it ranks right clips above wrong ones at
an AUROC of about 0.9, where P(text | clip) alone gives 0.85 (docs/benchmarks.md). It costs four
more model runs and lexicon searches a clip.

Evaluate (torch, on the stored test shards) and predict and serve (any backend, on a clip read
by the same front end) make the views of the same stored uint8 log-mel with these functions, so
the confidence predict answers is the one evaluate scores.
"""
import math

import numpy as np

VIEWS = (("speed", 0.9), ("speed", 1.1), ("band", 1), ("band", -1))
DISAGREE = -50.0  # the log-probability a view counts with when its own answer differs


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
    bands, frames = clip.shape
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


def transforms() -> list:
    """The views as functions of a stored batch, in VIEWS' order."""
    return [lambda batch, kind=kind, amount=amount: view(batch, kind, amount)
            for kind, amount in VIEWS]


def combine(logprob: float, others) -> float:
    """The confidence of a clip's answer from log P(text | clip) and, per view, (whether the
    view's own answer is the same text, log P(text | view)): exp of their mean, DISAGREE
    standing for a view that answers otherwise; to 6 significant digits, as every line
    confidence."""
    scores = [logprob] + [lp if same else DISAGREE for same, lp in others]
    return float(f"{math.exp(sum(scores) / len(scores)):.6g}")
