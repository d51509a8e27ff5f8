"""A dataset like real product photos: lookalike-rich classes of small grey images.

Each class is a slow random walk through the low frequencies of a 28x28 grey picture: every image
looks like the one before it (a few phash bits apart), so near-duplicate pairs run in long chains
through the class, while images far apart on the walk are plainly different pictures. Unioning
near-duplicate pairs transitively (the old rule) makes most of a class one group, which lands in
one split; clustering around representatives keeps groups small. Seeded: the same bytes always.
"""
from pathlib import Path

import numpy as np
from PIL import Image

SIDE = 28


def basis(side: int = SIDE, keep: int = 6) -> np.ndarray:
    """keep x side: the lowest cosine frequencies on `side` pixels."""
    k, x = np.arange(keep)[:, None], np.arange(side)[None, :]
    return np.cos(np.pi * k * (2 * x + 1) / (2 * side))


def walk(rng, n: int, step: float, keep: int = 6, turn: float = 0.3) -> list[np.ndarray]:
    """n 28x28 uint8 pictures along a walk of keep x keep cosine coefficients that keeps going
    (each step `step` long, its direction turning slowly), as a photo shoot drifts."""
    b = basis(keep=keep)
    c = rng.normal(0, 1, (keep, keep))
    v = rng.normal(0, 1, c.shape)
    out = []
    for _ in range(n):
        v = v + rng.normal(0, turn, c.shape)
        v *= step / np.linalg.norm(v)
        c = c + v
        x = b.T @ c @ b
        out.append(np.clip(128 + 40 * x / max(1.0, np.abs(x).max() / 3), 0, 255)
                   .astype(np.uint8))
    return out


def build(root, classes: int = 8, per_class: int = 300, step: float = 0.4, seed: int = 0):
    """<root>/c<k>/<i>.png for every class; returns {class: [relative paths in walk order]}.
    Each class has its own generator, so a larger per_class only adds files (the first ones
    keep their bytes): the same dataset, grown."""
    root = Path(root)
    made = {}
    for k in range(classes):
        made[f"c{k}"] = []
        rng = np.random.default_rng([seed, k])
        for i, pixels in enumerate(walk(rng, per_class, step)):
            rel = f"c{k}/{i:04d}.png"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels, "L").save(root / rel)
            made[f"c{k}"].append(rel)
    return made
