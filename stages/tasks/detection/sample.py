"""The built-in detection sample: seeded synthetic shapes on textured backgrounds, YOLO layout.

images/{train,val,test}/<index>.png, labels/{train,val,test}/<index>.txt (rows `cls xc yc w h`,
normalised) and data.yaml (`names`). Three classes (circle, square, triangle) of 6 to 56 pixels,
overlapping objects (a later shape hides at most 30% of an earlier one; each box is the extent
of the shape's visible pixels), small objects, and images with no object (an empty label file).

Byte-identical on every machine: pixels come from numpy's PCG64 and basic arithmetic only (no
transcendental functions, no font), and the PNG is written here with stored (uncompressed)
deflate blocks: no zlib compression level or Pillow version can change a byte. Boxes are the
exact pixel extent of each shape's visible pixels (no label for a hidden part, none for a
hidden shape).
"""
import struct
import zlib

import numpy as np

NAMES = ("circle", "square", "triangle")
SIZE = 160
SPLITS = (("train", 0.7), ("val", 0.15), ("test", 0.15))


def png_bytes(pixels: np.ndarray) -> bytes:
    """An RGB PNG of a HxWx3 uint8 array, deflate blocks stored (no compression)."""
    h, w, _ = pixels.shape
    raw = b"".join(b"\x00" + pixels[y].tobytes() for y in range(h))  # filter 0 per line
    blocks, at = [], 0
    while True:
        part = raw[at:at + 65535]
        at += len(part)
        final = at >= len(raw)
        blocks.append(struct.pack("<BHH", int(final), len(part), len(part) ^ 0xFFFF) + part)
        if final:
            break
    data = b"\x78\x01" + b"".join(blocks) + struct.pack(">I", zlib.adler32(raw))

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body)))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", data) + chunk(b"IEND", b""))


def background(rng) -> np.ndarray:
    """A textured float HxWx3 background: bilinear low-frequency colour noise plus grain."""
    grid = rng.integers(40, 216, (6, 6, 3)).astype(np.float64)
    t = np.arange(SIZE, dtype=np.float64) * 5 / (SIZE - 1)
    i = np.minimum(t.astype(np.int64), 4)
    f = t - i
    rows = grid[i] * (1 - f)[:, None, None] + grid[i + 1] * f[:, None, None]  # SIZE x 6 x 3
    img = rows[:, i] * (1 - f)[None, :, None] + rows[:, i + 1] * f[None, :, None]
    stripes = ((np.arange(SIZE)[None, :] + np.arange(SIZE)[:, None] * rng.integers(0, 3))
               % rng.integers(5, 12)) < 2
    img = img + stripes[..., None] * 12.0
    return img + rng.integers(-14, 15, (SIZE, SIZE, 1)).astype(np.float64)


def shape_mask(kind: int, x: int, y: int, w: int, h: int) -> np.ndarray:
    """A boolean SIZE x SIZE mask of one shape inside the box (x, y, w, h)."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    inside = (xx >= x) & (xx < x + w) & (yy >= y) & (yy < y + h)
    if kind == 1:  # square (a rectangle)
        return inside
    # pixel centres, scaled by 2 to stay in integers
    px, py = 2 * xx + 1 - (2 * x + w), 2 * yy + 1 - (2 * y + h)
    if kind == 0:  # ellipse inscribed in the box
        return inside & (px * px * h * h + py * py * w * w <= w * w * h * h)
    # triangle: apex at the top centre, base along the bottom
    return inside & (np.abs(px) * 2 * h <= (2 * yy + 1 - 2 * y) * w)


def iou(a, b) -> float:
    x1, y1 = max(a[0], b[0]), max(a[1], b[1])
    x2, y2 = min(a[0] + a[2], b[0] + b[2]), min(a[1] + a[3], b[1] + b[3])
    inter = max(0, x2 - x1) * max(0, y2 - y1)
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


VISIBLE = 0.7  # a later shape may hide at most 30% of an earlier one's pixels


def scene(index: int, seed: int = 0):
    """(HxWx3 float pixels, [(class, full mask, visible mask)]) of one image. A candidate
    shape is placed only where its box overlaps every earlier box at IoU < 0.3 and it leaves
    at least VISIBLE of each earlier shape's pixels in sight (20 tries, else no shape)."""
    rng = np.random.default_rng([seed, index])
    img = background(rng)
    count = 0 if rng.integers(0, 100) < 6 else int(rng.integers(1, 7))
    placed, shapes_ = [], []
    for _ in range(count):
        for _attempt in range(20):
            small = rng.integers(0, 100) < 25
            w = int(rng.integers(6, 14) if small else rng.integers(14, 57))
            h = int(np.clip(w * rng.integers(70, 141) // 100, 6, 60))
            x, y = int(rng.integers(0, SIZE - w + 1)), int(rng.integers(0, SIZE - h + 1))
            kind = int(rng.integers(0, len(NAMES)))
            mask = shape_mask(kind, x, y, w, h)
            if all(iou((x, y, w, h), q) < 0.3 for q in placed) and all(
                    (seen & ~mask).sum() >= VISIBLE * full.sum() for _, full, seen in shapes_):
                break
        else:
            continue
        colour = rng.integers(0, 256, 3).astype(np.float64)
        while np.abs(colour - img[y:y + h, x:x + w].mean(axis=(0, 1))).sum() < 150:
            colour = rng.integers(0, 256, 3).astype(np.float64)
        img[mask] = colour + rng.integers(-6, 7, (int(mask.sum()), 1))
        shapes_ = [(k, full, seen & ~mask) for k, full, seen in shapes_]
        placed.append((x, y, w, h))
        shapes_.append((kind, mask, mask))
    return img, shapes_


def draw(index: int, seed: int = 0):
    """(HxWx3 uint8 pixels, [(class, x1, y1, x2, y2)] exact pixel boxes) of one image: each
    box is the extent of the shape's visible pixels, after the later shapes are drawn."""
    img, shapes_ = scene(index, seed)
    out = []
    for kind, _, seen in shapes_:
        ys, xs = np.nonzero(seen)
        out.append((kind, int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8), out


def shapes(images: int = 1000, seed: int = 0):
    """Yield (relative path, bytes) of the sample, in a fixed order."""
    yield "data.yaml", ("# the built-in detection sample (stages/tasks/detection/sample.py)\n"
                        + "names: [" + ", ".join(NAMES) + "]\n").encode()
    start = 0
    for k, (split, share) in enumerate(SPLITS):
        stop = images if k == len(SPLITS) - 1 else start + max(1, round(images * share))
        for index in range(start, stop):
            pixels, boxes = draw(index, seed)
            yield f"images/{split}/{index:05d}.png", png_bytes(pixels)
            lines = "".join(f"{c} {(x1 + x2) / 2 / SIZE:.6f} {(y1 + y2) / 2 / SIZE:.6f} "
                            f"{(x2 - x1) / SIZE:.6f} {(y2 - y1) / SIZE:.6f}\n"
                            for c, x1, y1, x2, y2 in boxes)
            yield f"labels/{split}/{index:05d}.txt", lines.encode()
        start = stop
