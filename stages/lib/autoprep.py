"""prepare's `auto` settings: image size, channels and normalisation as functions of the data.

Every choice is a deterministic function of the split files and the dataset's bytes (no
sampling, no floating-point sums whose order could vary), so `dvc repro` reproduces it bit for
bit. Each comes with one line saying what was chosen and why; an explicit value gets a line too,
with a hint when `auto` would have chosen differently (your own data trained at the digits'
16x16 grey is then never silent). Task-agnostic: any task whose inputs are images.

- image_size auto: the median shorter side of the train images (from their headers, nothing
  decoded), rounded to the nearest multiple of 8, at least AUTO_SIZE_MIN (16: the small CNN
  pools twice, so smaller images are scaled up; the 8x8 digits sample is prepared at 16) and at
  most AUTO_SIZE_CAP.
- channels auto: 1 when every image (all splits) is grey (a grey mode, or a palette whose colours
  are all grey), else 3.
- mean/std: a list of one value applies to every channel (the committed [0.5] / [0.5] fits grey
  and colour data alike, so only the shape follows the data by default).
- mean/std auto: per channel, over every pixel of the prepared train split (after decoding,
  conversion and resizing: exactly what the model sees), computed from exact integer sums and
  rounded to 4 decimals.
"""
from pathlib import Path

from stages.lib.params import AUTO

AUTO_SIZE_CAP = 128  # image_size auto never exceeds this (set image_size to go larger)
AUTO_SIZE_MIN = 16  # nor goes below this: smaller images are scaled up (two 2x poolings)
SIZE_MULTIPLE = 8
GREY_MODES = {"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"}


def grey_header(img) -> bool:
    """From an opened image's header: a grey mode, or a palette of grey colours only."""
    if img.mode in GREY_MODES:
        return True
    if img.mode in ("P", "PA"):
        pal = img.getpalette() or []
        return all(pal[i] == pal[i + 1] == pal[i + 2] for i in range(0, len(pal) - 2, 3))
    return False


def is_grey(path) -> bool:
    """From the header: a grey mode, or a palette of grey colours only."""
    from stages.lib.images import open_header

    with open_header(path) as img:
        return grey_header(img)


def shorter_side(path) -> int:
    from stages.lib.images import open_header

    with open_header(path) as img:
        return min(img.size)


def header_facts(path) -> tuple[int, bool]:
    """(shorter side, grey) from one header read."""
    from stages.lib.images import open_header

    with open_header(path) as img:
        return min(img.size), grey_header(img)


def auto_size(sides: list) -> int:
    """The median shorter side, rounded to a multiple of 8, within [AUTO_SIZE_MIN,
    AUTO_SIZE_CAP]."""
    s = sorted(sides)
    median = (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2
    rounded = SIZE_MULTIPLE * round(median / SIZE_MULTIPLE)
    return int(min(AUTO_SIZE_CAP, max(AUTO_SIZE_MIN, rounded)))


def needs_headers_first(p) -> bool:
    """image_size or channels auto: the headers decide them before anything is decoded. With
    both explicit, prepare's workers collect the same facts while decoding (for the hints)."""
    return p.image_size == AUTO or p.channels == AUTO


def resolve_shape(p, splits: dict, source: Path) -> tuple:
    """(image_size, channels, [one line per setting]) from the params and the split rows.
    Reads every image's header (nothing is decoded) so that an explicit value that differs from
    what auto would choose gets a hint. (prepare itself gets these facts from its workers:
    choose_shape.)"""
    train = splits.get("train") or [r for rows in splits.values() for r in rows]
    every = [r for rows in splits.values() for r in rows]
    sides = [shorter_side(source / r["path"]) for r in train]
    colour = sum(not is_grey(source / r["path"]) for r in every)
    return choose_shape(p, sides, colour, len(every))


def choose_shape(p, sides: list, colour: int, total: int) -> tuple:
    """(image_size, channels, lines) from the facts of the headers: the shorter sides of the
    train images (of every image when there is no train split), and how many of all `total`
    images are colour."""
    sides = sorted(sides)
    size = auto_size(sides) if sides else AUTO_SIZE_MIN
    why = (f"median shorter side of {len(sides)} train images is "
           f"{sides[(len(sides) - 1) // 2] if sides else 0} px, rounded to a multiple of "
           f"{SIZE_MULTIPLE}, at least {AUTO_SIZE_MIN}, at most {AUTO_SIZE_CAP}")
    if p.image_size == AUTO:
        size_line = f"prepare.image_size: {size} (auto: {why})"
    else:
        size_line = f"prepare.image_size: {p.image_size} (params.yaml)" + (
            "" if p.image_size == size else f"; auto would choose {size}: {why}")
        size = p.image_size
    if p.height:  # text lines: image_size is not used
        size_line = f"prepare.image_size: unused (text lines at {p.height} x {p.width})"
    channels = 3 if colour else 1
    why = (f"{colour} of {total} images are colour" if colour
           else f"all {total} images are grey")
    if p.channels == AUTO:
        channels_line = f"prepare.channels: {channels} (auto: {why})"
    else:
        channels_line = f"prepare.channels: {p.channels} (params.yaml)" + (
            "" if p.channels == channels else f"; auto would choose {channels}: {why}")
        channels = p.channels
    return size, channels, [size_line, channels_line]


def check_norm(p, channels: int) -> None:
    """Explicit mean/std must have one value per (resolved) channel, or one for all."""
    if p.mean != AUTO and len(p.mean) not in (1, channels):
        from stages.lib.io import StageError

        raise StageError(f"prepare.mean and prepare.std have {len(p.mean)} value(s) but "
                         f"prepare.channels is {channels}: give one value per channel (or one "
                         f"for every channel), or set both to auto")


def value_counts(x):
    """(channels, 256) int64: how many pixels of each channel take each value, of a uint8
    NxHxWxC array. Exact integers: counts of any shards in any order add up to the same."""
    import numpy as np

    channels = x.shape[-1]
    counts = np.zeros((channels, 256), dtype=np.int64)
    for start in range(0, len(x), 64):  # 64 images at a time: bincount widens to int64
        flat = x[start:start + 64].reshape(-1, channels)
        for c in range(channels):
            counts[c] += np.bincount(flat[:, c], minlength=256)
    return counts


def resolve_norm(p, channels: int, train_images=None, counts=None) -> tuple:
    """(mean, std, line): the params' values, or the train split's when auto, from `counts`
    (value_counts summed over the train shards, as prepare's workers give them) or else from
    train_images() (an iterable of uint8 NxHxWxC arrays)."""
    check_norm(p, channels)
    if p.mean != AUTO:  # one value is every channel's
        mean, std = (list(v) * (channels if len(v) == 1 else 1) for v in (p.mean, p.std))
        return mean, std, (f"prepare.mean/std: {mean} / {std} "
                           f"(params.yaml; auto uses the train split's)")
    import numpy as np

    if counts is None:
        counts = np.zeros((channels, 256), dtype=np.int64)
        for x in train_images():
            counts = counts + value_counts(x)
    values = np.arange(256, dtype=np.int64)
    total = [int((counts[c] * values).sum()) for c in range(channels)]  # exact integers
    squares = [int((counts[c] * values * values).sum()) for c in range(channels)]
    n = int(counts[0].sum()) if channels else 0
    mean, std = [], []
    for c in range(channels):  # exact integers up to here; one division per value
        m = total[c] / (n * 255)
        var = max(0.0, squares[c] / (n * 255 * 255) - m * m)
        mean.append(round(m, 4))
        std.append(max(round(var ** 0.5, 4), 0.0001))  # a constant channel: never divide by 0
    return mean, std, (f"prepare.mean/std: {mean} / {std} (auto: per channel over "
                       f"{n} train pixels)")
