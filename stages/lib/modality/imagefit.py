"""The image modality's fit settings: prepare's `auto` image size and channels, from the headers.

Deterministic functions of the split files' headers (nothing decoded, no sampling), each with
one line saying what was chosen and why; an explicit value gets a line too, with a hint when
`auto` would have chosen differently (your own data trained at the digits' 16x16 grey is then
never silent).

- image_size auto: the median shorter side of the train images (from their headers),
  rounded to the nearest multiple of 8, at least AUTO_SIZE_MIN (16: the small CNN pools twice,
  so smaller images are scaled up; the 8x8 digits sample is prepared at 16) and at most
  AUTO_SIZE_CAP.
- channels auto: 1 when every image (all splits) is grey (a grey mode, or a palette whose colours
  are all grey), else 3.
"""
from pathlib import Path

from stages.lib.modality.imagecore import grey_header, open_header, upright_size
from stages.lib.modality.spec import AUTO

AUTO_SIZE_CAP = 128  # image_size auto never exceeds this (set image_size to go larger)
AUTO_SIZE_MIN = 16  # nor goes below this: smaller images are scaled up (two 2x poolings)
SIZE_MULTIPLE = 8


def is_grey(path) -> bool:
    """From the header: a grey mode, or a palette of grey colours only."""
    with open_header(path) as img:
        return grey_header(img)


def shorter_side(path) -> int:
    with open_header(path) as img:
        return min(img.size)


def header_facts(path) -> tuple[int, bool]:
    """(shorter side, grey) from one header read."""
    with open_header(path) as img:
        return min(img.size), grey_header(img)


def header(path) -> tuple[int, int, bool]:
    """(width, height, grey) from one header read, the sizes upright (an EXIF quarter turn
    swaps them): what init shows of the data and Task.fit_prepare reads. Whatever Pillow
    raises on a file that is no image passes through."""
    with open_header(path) as img:
        return (*upright_size(img), grey_header(img))


def auto_size(sides: list) -> int:
    """The median shorter side, rounded to a multiple of 8, within [AUTO_SIZE_MIN,
    AUTO_SIZE_CAP]."""
    s = sorted(sides)
    median = (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2
    rounded = SIZE_MULTIPLE * round(median / SIZE_MULTIPLE)
    return int(min(AUTO_SIZE_CAP, max(AUTO_SIZE_MIN, rounded)))


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
    size, size_line = chosen("image_size", p.image_size, size, why)
    if p.height:  # text lines: image_size is not used
        size_line = f"prepare.image_size: unused (text lines at {p.height} x {p.width})"
    why = (f"{colour} of {total} images are colour" if colour
           else f"all {total} images are grey")
    channels, channels_line = chosen("channels", p.channels, 3 if colour else 1, why)
    return size, channels, [size_line, channels_line]


def chosen(key: str, given, auto, why: str) -> tuple:
    """(value, line) of prepare.<key>: `auto` (what auto chooses, for `why`) when params.yaml
    says auto, else its own value, the line saying what auto would choose instead."""
    if given == AUTO:
        return auto, f"prepare.{key}: {auto} (auto: {why})"
    return given, f"prepare.{key}: {given} (params.yaml)" + (
        "" if given == auto else f"; auto would choose {auto}: {why}")


