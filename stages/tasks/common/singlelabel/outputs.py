"""Classifier outputs: logits -> top-k rows for predict and serve, and top-1 for export parity."""
import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def top_k(logits: np.ndarray, classes, k: int) -> list[list[dict]]:
    """Per row, the k most probable classes, best first: [{"label", "score"}, ...].

    Ties go to the lower class index, like argmax, so the first entry is argmax(logits).
    """
    probs = softmax(logits.astype(np.float64))
    k = max(1, min(k, probs.shape[1]))
    order = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    return [[{"label": str(classes[j]), "score": round(float(p[j]), 6)} for j in row]
            for p, row in zip(probs, order, strict=True)]


def decode(logits, classes, k: int) -> list[dict]:
    """One prediction per image: its best label, that label's probability and the top k."""
    return [{"label": topk[0]["label"], "score": topk[0]["score"], "topk": topk}
            for topk in top_k(np.asarray(logits), classes, k)]
