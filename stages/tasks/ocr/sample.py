"""The built-in OCR sample: seeded synthetic text lines, byte-identical on every machine.

Each line is random words and numbers over a fixed alphabet (digits, Latin letters, punctuation
and ten CJK characters), drawn from the bitmap glyphs of glyphs.py, stretched, slightly rotated,
blurred and noised, and written as a binary PGM (no compression library in the bytes) with its
transcript in a PaddleOCR-style `rec_gt.txt` (`images/00000.pgm<TAB>text`).

Why the bytes cannot change between machines: no font file, FreeType, Pillow drawing or zlib is
involved; every step is numpy integer arithmetic or elementwise float64 additions, products and
divisions (IEEE-754 exact rounding; no BLAS reduction, no sin/cos/exp from a platform libm: the
rotation is a rational matrix, the noise uniform integers); random draws come from numpy's PCG64
`Generator` seeded by (SEED, line index); numpy is pinned in requirements.lock. The sample test
checks a hash of the whole output.
"""
import numpy as np

from stages.tasks.ocr.glyphs import CJK, GLYPHS

SEED = 20
LINES = 2400  # sample.lines: 0
LIST = "rec_gt.txt"
HEIGHT = 32  # rendered line height in pixels
MAX_WIDTH = 184  # a line never renders wider (prepare.width of the sample is 192)
SCALE = 2  # glyph pixels per bitmap pixel
LOWER = "abcdefghijklmnopqrstuvwxyz"
UPPER = LOWER.upper()
DIGITS = "0123456789"
CJK_CHARS = "".join(CJK)
MAX_CHARS = 12


def bitmap(ch: str) -> np.ndarray:
    """float64 11 x w ink mask (1 = ink) of one character; a space is 4 empty columns."""
    if ch == " ":
        return np.zeros((11, 4))
    rows = GLYPHS[ch].split(" ")
    return np.array([[c == "#" for c in r] for r in rows], dtype=np.float64)


def random_text(rng) -> str:
    """1 to 3 tokens (words, numbers, CJK words), with punctuation, at most MAX_CHARS long."""
    while True:
        tokens = []
        for _ in range(int(rng.integers(1, 4))):
            kind = int(rng.integers(0, 10))
            if kind < 5:  # a word
                word = "".join(LOWER[int(i)] for i in rng.integers(0, 26, int(rng.integers(2, 8))))
                case = int(rng.integers(0, 4))
                word = word.capitalize() if case == 1 else word.upper() if case == 2 else word
                tokens.append(word)
            elif kind < 8:  # a number
                number = "".join(DIGITS[int(i)] for i in rng.integers(0, 10,
                                                                       int(rng.integers(1, 6))))
                form = int(rng.integers(0, 8))
                if form == 1 and len(number) > 1:
                    number = number[:-1] + "." + number[-1]
                elif form == 2 and len(number) > 3:
                    number = number[:-3] + "," + number[-3:]
                elif form == 3:
                    number = "-" + number
                elif form == 4:
                    number = number + "%"
                elif form == 5:
                    number = "+" + number
                elif form == 6:
                    number = "#" + number
                tokens.append(number)
            else:  # a CJK word
                tokens.append("".join(CJK_CHARS[int(i)] for i in
                                      rng.integers(0, len(CJK_CHARS), int(rng.integers(1, 4)))))
            mark = int(rng.integers(0, 16))
            if mark < 7:
                tokens[-1] += ".,:;!?'"[mark]
            elif mark == 7:
                tokens[-1] = "(" + tokens[-1] + ")"
            elif mark == 8:
                tokens[-1] = "'" + tokens[-1]
            elif mark == 9 and len(tokens) > 1:
                tokens[-1] = "/" + tokens[-1]
            elif mark == 10 and len(tokens) > 1:
                tokens[-1] = "& " + tokens[-1]
        text = " ".join(tokens)
        if len(text) <= MAX_CHARS:
            return text


def blur(a: np.ndarray) -> np.ndarray:
    """One pass of the separable [1, 2, 1] / 4 kernel, edges repeated."""
    p = np.pad(a, 1, mode="edge")
    a = (p[:, :-2] + 2 * p[:, 1:-1] + p[:, 2:]) / 4
    return (a[:-2] + 2 * a[1:-1] + a[2:]) / 4


def bilinear(ink: np.ndarray, ys: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """ink sampled at float coordinates (0 outside)."""
    h, w = ink.shape
    p = np.pad(ink, 1)
    ys, xs = np.clip(ys + 1, 0, h + 0.999), np.clip(xs + 1, 0, w + 0.999)
    y0, x0 = np.floor(ys).astype(np.int64), np.floor(xs).astype(np.int64)
    y1, x1 = np.minimum(y0 + 1, h + 1), np.minimum(x0 + 1, w + 1)
    fy, fx = ys - y0, xs - x0
    return ((p[y0, x0] * (1 - fx) + p[y0, x1] * fx) * (1 - fy)
            + (p[y1, x0] * (1 - fx) + p[y1, x1] * fx) * fy)


def render(text: str, rng) -> np.ndarray:
    """uint8 HEIGHT x w grey line image of text (dark ink on light paper)."""
    parts = []
    for ch in text:
        parts.append(bitmap(ch))
        parts.append(np.zeros((11, int(rng.integers(0, 2)))))  # letter spacing 0-1
    ink = np.kron(np.concatenate(parts, axis=1), np.ones((SCALE, SCALE)))
    h, w = ink.shape
    stretch = int(rng.integers(80, 126)) / 100  # varying widths
    margin_l, margin_r = int(rng.integers(2, 9)), int(rng.integers(2, 9))
    stretch = min(stretch, (MAX_WIDTH - margin_l - margin_r) / w)
    new_w = max(1, int(w * stretch))
    top = (HEIGHT - h) // 2 + int(rng.integers(-2, 3))
    width = new_w + margin_l + margin_r
    t = int(rng.integers(-3, 4)) / 100  # rotation by about +-1.7 degrees, as a rational matrix
    yy, xx = np.mgrid[0:HEIGHT, 0:width].astype(np.float64)
    cy, cx = (HEIGHT - 1) / 2, (width - 1) / 2
    dy, dx = yy - cy, xx - cx
    ry, rx = (dy - t * dx) / (1 + t * t) + cy, (dx + t * dy) / (1 + t * t) + cx
    # canvas coordinates -> the glyph strip's: shift by the margins, undo the stretch
    src_x = (rx - margin_l + 0.5) / stretch - 0.5
    src_y = ry - top
    line = bilinear(ink, src_y, src_x)
    for _ in range(int(rng.integers(0, 3))):
        line = blur(line)
    paper, dark = int(rng.integers(170, 251)), int(rng.integers(0, 91))
    pixels = paper + (dark - paper) * line
    amplitude = int(rng.integers(0, 21))
    pixels = pixels + rng.integers(-amplitude, amplitude + 1, pixels.shape)
    return np.clip(np.floor(pixels + 0.5), 0, 255).astype(np.uint8)


def pgm(pixels: np.ndarray) -> bytes:
    h, w = pixels.shape
    return f"P5\n{w} {h}\n255\n".encode() + pixels.tobytes()


def text_lines(n: int):
    """Yield (relative path, bytes): n line images, then rec_gt.txt."""
    entries = []
    for i in range(n):
        rng = np.random.Generator(np.random.PCG64([SEED, i]))
        text = random_text(rng)
        rel = f"images/{i:05d}.pgm"
        entries.append(f"{rel}\t{text}\n")
        yield rel, pgm(render(text, rng))
    yield LIST, "".join(entries).encode("utf-8")
