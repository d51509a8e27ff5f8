"""CTC pieces shared by train, evaluate, export, predict and serve: the one greedy decoder (so
all of them decode identically), target encoding and the character error rate. numpy only.

Outputs are N x T x C logits; class 0 is the CTC blank, class i + 1 is charset[i].
"""
import numpy as np

BLANK = 0


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def collapse(path) -> list[int]:
    """A best path's labels: repeats merged, then blanks dropped."""
    path = list(path)
    return [int(c) for i, c in enumerate(path) if c != BLANK and (i == 0 or path[i - 1] != c)]


def greedy(logits: np.ndarray, charset) -> list[tuple[str, float]]:
    """(text, confidence) per line: the best class per frame, repeats merged, blanks dropped.
    confidence: the mean max probability over the frames whose best class is not blank (over
    all frames when every frame is blank, i.e. how sure the model is the line is empty)."""
    probs = softmax(logits)
    best, top = probs.argmax(-1), probs.max(-1)
    out = []
    for path, p in zip(best, top, strict=True):
        text = "".join(charset[i - 1] for i in collapse(path.tolist()))
        steps = path != BLANK
        confidence = float(p[steps].mean() if steps.any() else p.mean())
        out.append((text, round(confidence, 6)))
    return out


def encode(text: str, index: dict, max_len: int) -> list[int]:
    """[length, code, ..., 0 padding] (max_len + 1 values); characters not in the charset (only
    val/test lines can hold them when the charset is derived from train) are left out."""
    codes = [index[c] for c in text if c in index][:max_len]
    return [len(codes), *codes, *[0] * (max_len - len(codes))]


def distance(a: str, b: str) -> int:
    """Levenshtein distance (rapidfuzz); the tests cross-check it against a hand DP."""
    from rapidfuzz.distance import Levenshtein

    return Levenshtein.distance(a, b)
