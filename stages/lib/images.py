"""The one definition of how a file becomes model input.

prepare, evaluate, export and predict all go through `load_image` (decode, convert, resize)
and `normalize` (scale and standardise), so the model never sees pixels prepared two ways.
Only numpy and Pillow here: ONNX consumers can preprocess without torch.
"""
import hashlib

import numpy as np
from PIL import Image

CHUNK = 1 << 20


def sha256_file(path) -> str:
    """Hash a file in 1 MiB chunks so a large file is never read into memory at once."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def inspect_image(path) -> dict:
    """Format, size and mode of an image, after a full decode; `error` is empty when it decodes."""
    facts = {"format": "", "width": 0, "height": 0, "mode": "", "error": ""}
    try:
        with Image.open(path) as img:
            facts.update(format=img.format or "", width=img.width, height=img.height, mode=img.mode)
            img.load()  # a header check is not enough: truncated files fail only here
    except Exception as exc:  # PIL raises many types; every one means "not a usable image"
        facts["error"] = f"cannot decode: {type(exc).__name__}: {exc}".replace("\n", " ")
    return facts


def load_image(path, image_size: int, channels: int) -> np.ndarray:
    """Decode, convert to grey or RGB, and resize to image_size x image_size: uint8 HxWxC."""
    with Image.open(path) as img:
        img = img.convert("L" if channels == 1 else "RGB")
        img = img.resize((image_size, image_size), Image.Resampling.BILINEAR)
        arr = np.asarray(img, dtype=np.uint8)
    return arr.reshape(image_size, image_size, channels)


def normalize(batch: np.ndarray, mean, std) -> np.ndarray:
    """uint8 NxHxWxC -> float32 NxCxHxW, scaled to [0, 1] then standardised per channel."""
    x = batch.astype(np.float32) / 255.0
    x = (x - np.asarray(mean, dtype=np.float32)) / np.asarray(std, dtype=np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def load_processed(split: str, root="data/processed"):
    """(normalised float32 NxCxHxW, int64 labels, meta) of one split written by prepare."""
    from pathlib import Path

    from stages.lib.io import read_json

    root = Path(root)
    meta = read_json(root / "meta.json")
    x = np.load(root / f"{split}_x.npy", allow_pickle=False)
    y = np.load(root / f"{split}_y.npy", allow_pickle=False)
    return normalize(x, meta["mean"], meta["std"]), y, meta
