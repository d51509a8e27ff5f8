"""Model outputs -> mask predictions, for predict and serve.

Each prediction: `size` [height, width] of the mask, `areas` {class: pixels}, `rle` (the mask
row by row as runs: {"size": [h, w], "values": [...], "lengths": [...]}) and `mask_png` (the
mask as a single-channel PNG of class indices, base64). predict also writes the PNG, resized to
the input's own size by nearest neighbour, with --out-dir: under the input's relative path,
marked with the input it was written for, and never into an input folder or over a file that
is not such a mask of the same input (stages/lib/data/outdir.py).
"""
import base64
import io
import json
from pathlib import PurePath

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


MARK = "predict-input"  # the PNG text chunk naming the input a mask was written for


def mask_name(path: str) -> str:
    """The mask file's name for input `path`: its name with .png added (kept when it is one)."""
    name = PurePath(path).name
    return name if PurePath(name).suffix.lower() == ".png" else name + ".png"


def written_for(target) -> str | None:
    """The input that predict wrote the mask at target for (its MARK), or None when target is
    not a mask predict wrote."""
    from PIL import Image

    try:
        with Image.open(target) as img:
            mark = img.info.get(MARK) if img.format == "PNG" else None
        return json.loads(mark) if isinstance(mark, str) else None
    except Exception:  # not an image, truncated, not JSON: not ours
        return None


def write_prediction(row: dict, out, empty: dict) -> dict:
    """Write the row's mask as a PNG at the input image's own size (nearest neighbour from the
    model's resolution) under out (a stages.lib.data.outdir.OutDir), at the input's relative path;
    the row's mask_png becomes the file's path. A mask that may not be written there (inside
    an input folder, over the input or over a file predict did not write for this input)
    makes the row an error row (kind mask_refused) and nothing is written."""
    from PIL import Image, PngImagePlugin

    from stages.lib.io import write_bytes

    target = out.target(row["path"], mask_name(row["path"]))
    why = out.refuse(target, row["path"], written_for)
    if why:
        return {**row, **empty, "error": f"mask_refused: {why}; the mask was not written: "
                                         f"choose another --out-dir"}
    with Image.open(row["path"]) as img:
        size = img.size
    mask = Image.fromarray(unrle(row["rle"]), "L").resize(size, Image.Resampling.NEAREST)
    info = PngImagePlugin.PngInfo()
    info.add_text(MARK, json.dumps(row["path"]))  # ASCII: any file name fits a tEXt chunk
    buf = io.BytesIO()
    mask.save(buf, format="PNG", pnginfo=info)
    write_bytes(target, buf.getvalue())
    return {**row, "mask_png": target.as_posix()}
