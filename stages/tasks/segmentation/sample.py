"""The built-in segmentation sample: seeded synthetic shapes and blobs on textured backgrounds.

Each image is 128 x 128 RGB with 1-5 objects of three foreground classes (1 disc, 2 box, 3 blob)
drawn on a background of muted smooth colour noise, stripes and speckle; the mask holds the
class index of every pixel (0 background), exactly as drawn (later objects cover earlier ones).
Each class has its own saturated colour family (reddish discs, greenish boxes, bluish blobs,
with random shifts and shading), so a small model separates them in minutes on a CPU; shape
and colour both tell them apart.

Byte-identical on every machine: numpy's seeded uniform draws and IEEE arithmetic only (+, *,
sqrt: no sin, exp or normal draws, whose last bits depend on the maths library and the CPU's
vector unit), and PNG bytes written here with stored (uncompressed) deflate blocks, so no zlib
version can change them.
"""
import struct
import zlib

import numpy as np

SIZE = 128
CLASSES = {0: "background", 1: "disc", 2: "box", 3: "blob"}
DEFAULT_IMAGES = 600
SEED = 20261201
FAMILY = {1: np.array([215, 50, 50]), 2: np.array([50, 200, 60]), 3: np.array([50, 70, 215])}


def png_bytes(pixels: np.ndarray) -> bytes:
    """A PNG of uint8 HxW (grey) or HxWx3 (RGB) pixels: filter 0 on every row, the zlib stream
    built from stored blocks (no compression: the same bytes with any zlib)."""
    h, w = pixels.shape[:2]
    colour = 2 if pixels.ndim == 3 else 0
    rows = np.ascontiguousarray(pixels).reshape(h, -1)
    raw = b"".join(b"\0" + rows[i].tobytes() for i in range(h))
    blocks = []
    for start in range(0, len(raw), 65535):
        chunk = raw[start:start + 65535]
        last = start + 65535 >= len(raw)
        blocks.append(struct.pack("<BHH", int(last), len(chunk), len(chunk) ^ 0xFFFF) + chunk)
    stream = b"\x78\x01" + b"".join(blocks) + struct.pack(">I", zlib.adler32(raw))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", stream)
            + chunk(b"IEND", b""))


def background(rng) -> np.ndarray:
    """Smooth colour noise (bilinearly upsampled 8x8 grid) plus stripes and speckle."""
    grid = rng.integers(70, 171, size=(9, 9, 1)) + rng.integers(-20, 21, size=(9, 9, 3))
    grid = grid.astype(np.float64)
    t = np.linspace(0, 8, SIZE)
    i0 = np.minimum(t.astype(int), 7)
    f = (t - i0)[:, None]
    rows = grid[i0] * (1 - f[..., None]) + grid[i0 + 1] * f[..., None]  # 128 x 9 x 3
    img = rows[:, i0] * (1 - f.T[..., None]) + rows[:, i0 + 1] * f.T[..., None]
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    c, s = unit(rng)
    stripes = triangle((xx * c + yy * s) / rng.uniform(6, 20))
    img += stripes[..., None] * rng.uniform(5, 25) * rng.uniform(-1, 1, size=3)
    img += rng.integers(-12, 13, size=img.shape)
    return img


def unit(rng) -> tuple[float, float]:
    """A random direction (cos, sin) without trigonometry: a normalised uniform vector."""
    while True:
        x, y = rng.uniform(-1, 1, size=2)
        n = x * x + y * y
        if 0.01 < n <= 1:
            return x / np.sqrt(n), y / np.sqrt(n)


def triangle(t):
    """A triangle wave in [-1, 1] with period 1 (a sine's role, with exact arithmetic)."""
    return 4 * np.abs(t - np.floor(t + 0.5)) - 1


def draw(rng) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 128x128x3 image, uint8 128x128 mask) of one sample."""
    img = background(rng)
    mask = np.zeros((SIZE, SIZE), dtype=np.uint8)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    for _ in range(int(rng.integers(1, 6))):
        cls = int(rng.integers(1, 4))
        cy, cx = rng.uniform(10, SIZE - 10, size=2)
        r = rng.uniform(8, 22)
        if cls == 1:  # disc
            inside = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
        elif cls == 2:  # box, rotated
            c, s = unit(rng)
            u = (xx - cx) * c + (yy - cy) * s
            v = -(xx - cx) * s + (yy - cy) * c
            inside = (np.abs(u) <= r) & (np.abs(v) <= r * rng.uniform(0.5, 1.0))
        else:  # blob: a union of overlapping smaller discs
            inside = np.zeros((SIZE, SIZE), dtype=bool)
            for _ in range(4):
                oy, ox = rng.uniform(-0.6, 0.6, size=2) * r
                rr = r * rng.uniform(0.35, 0.6)
                inside |= (yy - cy - oy) ** 2 + (xx - cx - ox) ** 2 <= rr * rr
        colour = (FAMILY[cls] + rng.integers(-40, 41, size=3)).clip(0, 255).astype(np.float64)
        shade = 1 + 0.15 * triangle((xx + yy) / rng.uniform(8, 24))[..., None]
        img = np.where(inside[..., None], colour * shade + rng.integers(-8, 9, size=img.shape),
                       img)
        mask[inside] = cls
    return np.clip(np.rint(img), 0, 255).astype(np.uint8), mask


def classes_yaml() -> bytes:
    return ("# class index: name (the values in masks/); 255 is ignored\n"
            + "".join(f"{i}: {name}\n" for i, name in CLASSES.items())).encode()


def sample_files(count: int):
    """Yield (relative path, bytes): images/NNNNN.png, masks/NNNNN.png, classes.yaml."""
    yield "classes.yaml", classes_yaml()
    for i in range(count or DEFAULT_IMAGES):
        rng = np.random.default_rng([SEED, i])
        img, mask = draw(rng)
        yield f"images/{i:05d}.png", png_bytes(img)
        yield f"masks/{i:05d}.png", png_bytes(mask)
