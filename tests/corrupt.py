"""A dataset with every kind of trouble a real one has, written as real files.

`build(root)` writes it under root (an ImageFolder tree) and returns which relative paths are
bad (must never reach training) and which are good (odd but usable, or plain).
"""
import hashlib
import io
import os
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image


def photo(seed: int, size=64, mode="RGB") -> Image.Image:
    """A smooth random picture: low-resolution noise scaled up, so that a perceptual hash
    survives re-encoding and resizing as it does for real photos."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)
    img = Image.fromarray(small, "RGB").resize((size, size), Image.Resampling.BICUBIC)
    return img.convert(mode)


def encoded(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def png_bomb(width=10000, height=10000, bits=1) -> bytes:
    """A valid greyscale PNG (`bits` 1 or 8 per pixel) of width x height black pixels, tiny on
    disk (~15 KB for the default 100 M 1-bit pixels): decoding it would allocate every pixel.
    Written chunk by chunk, so making it costs no memory either."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    row = b"\0" * (1 + (width * bits + 7) // 8)
    z = zlib.compressobj(9)
    idat = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, bits, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat)
            + chunk(b"IEND", b""))


def write(root: Path, rel: str, data: bytes) -> str:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return rel


def build(root, outside=None) -> tuple[dict[str, str], set[str]]:
    """Write the dataset; return ({bad path: what is wrong}, {good paths})."""
    root = Path(root)
    good, bad = set(), {}
    for label, base, fmt in (("cat", 0, "PNG"), ("dog", 100, "JPEG"), ("bird", 200, "PNG")):
        for i in range(6):
            ext = ".png" if fmt == "PNG" else ".jpg"
            good.add(write(root, f"{label}/{label}{i}{ext}", encoded(photo(base + i), fmt)))
    # Broken: every one of these must be named and kept out of training.
    jpeg, png = encoded(photo(900), "JPEG"), encoded(photo(901), "PNG")
    bad[write(root, "cat/zero.jpg", b"")] = "empty"
    bad[write(root, "cat/truncated.jpg", jpeg[: len(jpeg) // 2])] = "undecodable"
    bad[write(root, "dog/truncated.png", png[: len(png) // 2])] = "undecodable"
    bad[write(root, "dog/random.jpg", np.random.default_rng(5).bytes(3000))] = "undecodable"
    bad[write(root, "bird/notes.png", b"this is a text file, not an image\n" * 20)] = "undecodable"
    bad[write(root, "bird/tiny.png", encoded(photo(902, size=1), "PNG"))] = "too_small"
    bad[write(root, "cat/bomb.png", png_bomb())] = "too_large"
    same = encoded(photo(903), "PNG")
    bad[write(root, "cat/same.png", same)] = "label_conflict"
    bad[write(root, "dog/same.png", same)] = "label_conflict"
    outside = Path(outside or root.parent / "outside")
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "secret.png").write_bytes(encoded(photo(904), "PNG"))
    os.symlink(os.path.relpath(outside / "secret.png", root / "dog"), root / "dog/escape.png")
    bad["dog/escape.png"] = "symlink"
    (root / "fish").mkdir()
    bad["fish/"] = "empty_folder"
    # Odd but valid: converted by the shared preprocessing, warned about, used.
    deep = (np.asarray(photo(300, mode="L"), dtype=np.uint16) * 257)
    good.add(write(root, "cat/deep 16-bit.png", encoded(Image.fromarray(deep), "PNG")))
    good.add(write(root, "dog/cmyk.jpg", encoded(photo(301, mode="CMYK"), "JPEG")))
    pal = photo(302).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    good.add(write(root, "bird/palette alpha.png", encoded(pal, "PNG", transparency=0)))
    frames = [photo(303 + k) for k in range(3)]
    good.add(write(root, "bird/anim.gif", encoded(frames[0], "GIF", save_all=True,
                                                  append_images=frames[1:], duration=100,
                                                  loop=0)))
    good.add(write(root, "cat/my cät ü 猫.png", encoded(photo(304), "PNG")))
    good.add(write(root, "dog/really a png.jpg", encoded(photo(305), "PNG")))
    good.add(write(root, "cat/cat0 copy.png", (root / "cat/cat0.png").read_bytes()))
    # Near-duplicates: the same picture re-encoded as JPEG, or slightly resized too, chosen so
    # that on their own hashes the two files would land in different splits (the pipeline's
    # default split params): only grouping keeps them together.
    seed = 400
    for i, label in enumerate(NEAR_LABELS):
        while True:
            seed += 1
            original = photo(seed, size=96)
            twin = original if i % 2 else original.resize((88, 88), Image.Resampling.LANCZOS)
            a, b = encoded(original, "PNG"), encoded(twin, "JPEG", quality=80)
            if straddles(a, b) and hamming(a, b) <= 2:
                break
        good.add(write(root, f"{label}/near{i}.png", a))
        good.add(write(root, f"{label}/near{i} twin.jpg", b))
    return bad, good


NEAR_LABELS = ("cat", "dog", "bird", "cat", "dog", "bird")
NEAR_PAIRS = [(f"{label}/near{i}.png", f"{label}/near{i} twin.jpg")
              for i, label in enumerate(NEAR_LABELS)]


def straddles(a: bytes, b: bytes, seed=42, val=0.15, test=0.15) -> bool:
    from stages.split import assign

    return (assign(hashlib.sha256(a).hexdigest(), seed, val, test)
            != assign(hashlib.sha256(b).hexdigest(), seed, val, test))


def hamming(a: bytes, b: bytes) -> int:
    from stages.lib.modality.imagecore import phash

    with Image.open(io.BytesIO(a)) as x, Image.open(io.BytesIO(b)) as y:
        return bin(int(phash(x), 16) ^ int(phash(y), 16)).count("1")
