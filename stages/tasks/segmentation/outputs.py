"""Model outputs -> mask predictions, for predict and serve.

Each prediction: `size` [height, width] of the mask, `areas` {class: pixels}, `rle` (the mask
row by row as runs: {"size": [h, w], "values": [...], "lengths": [...]}) and `mask_png` (the
mask as a single-channel PNG of class indices, base64). predict also writes the PNG, resized to
the input's own size by nearest neighbour, with --out-dir.
"""
import base64
import io

import numpy as np


def rle(mask: np.ndarray) -> dict:
    flat = mask.ravel()
    starts = np.flatnonzero(np.r_[True, flat[1:] != flat[:-1]])
    lengths = np.diff(np.r_[starts, flat.size])
    return {"size": list(mask.shape), "values": flat[starts].tolist(), "lengths": lengths.tolist()}


def unrle(code: dict) -> np.ndarray:
    return np.repeat(np.asarray(code["values"], dtype=np.uint8),
                     code["lengths"]).reshape(code["size"])


def png(mask: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(mask.astype(np.uint8), "L").save(buf, format="PNG")
    return buf.getvalue()


def decode(outputs, classes) -> list[dict]:
    out = []
    for logits in outputs:
        mask = logits.argmax(0).astype(np.uint8)
        counts = np.bincount(mask.ravel(), minlength=len(classes))
        out.append({"size": list(mask.shape),
                    "areas": {c: int(n) for c, n in zip(classes, counts, strict=False) if n},
                    "rle": rle(mask), "mask_png": base64.b64encode(png(mask)).decode()})
    return out


def mask_path(path: str, out_dir):
    """Where predict --out-dir puts the mask of input `path`: its relative path (an absolute
    path or one climbing with .. keeps only its name) with the suffix .png."""
    from pathlib import Path

    rel = Path(path)
    if rel.is_absolute() or ".." in rel.parts:
        rel = Path(rel.name)
    return Path(out_dir) / rel.with_name(rel.name + ".png" if rel.suffix.lower() != ".png"
                                         else rel.name)


def write_prediction(row: dict, out_dir) -> dict:
    """Write the row's mask as a PNG at the input image's own size (nearest neighbour from the
    model's resolution); the row's mask_png becomes the file's path."""
    from PIL import Image

    from stages.lib.io import write_bytes

    with Image.open(row["path"]) as img:
        size = img.size
    mask = Image.fromarray(unrle(row["rle"]), "L").resize(size, Image.Resampling.NEAREST)
    buf = io.BytesIO()
    mask.save(buf, format="PNG")
    target = mask_path(row["path"], out_dir)
    write_bytes(target, buf.getvalue())
    return {**row, "mask_png": target.as_posix()}
