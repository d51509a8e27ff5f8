"""A second line renderer, to test on (tools.ocr_testlines): lines that the training generator
(synth.py) did not draw, so a test set shows what a reader learned beyond its own generator.

Where synth.py draws one character at a time at a random tracking with a per-character
baseline jitter, a Gaussian blur and Gaussian noise, at a fixed share of the line height, this
one draws the whole string with Pillow's ImageDraw.text (its own advances and kerning-free
BASIC layout), 4x supersampled, rotated up to `rotate` degrees (bicubic), and cuts the line box
as a detector, a scanner or a hand would: the crop tightness of each line is `tight` (cap
height 0.62-0.80 of the line), `medium` (0.45-0.62) or `loose` (0.30-0.45), its box centred on
the ink's bounding box moved up to 6% of the height, side margins per tightness. Paper is a
linear gradient (x and y), ink a flat grey, then the line is reduced to `height` with a box
filter, box-blurred with probability 1/2, and gets Gaussian noise plus salt-and-pepper specks.
Every draw comes from a numpy PCG64 generator seeded by (seed, i)."""
from dataclasses import dataclass

CROPS = ("tight", "medium", "loose")
CAP = {"tight": (0.62, 0.80), "medium": (0.45, 0.62), "loose": (0.30, 0.45)}
MARGIN = {"tight": (0.0, 0.15), "medium": (0.1, 0.4), "loose": (0.3, 0.8)}  # line heights
SUPER = 4  # supersampling


@dataclass(frozen=True)
class Plain:
    height: int = 32
    rotate: float = 2.0  # degrees, either way
    words: int = 3
    max_chars: int = 16


def cap_ratio(font_path, size: int = 200) -> float:
    """The font's cap height (the ink of 'H') over its size."""
    from PIL import ImageFont

    font = ImageFont.truetype(str(font_path), size, layout_engine=ImageFont.Layout.BASIC)
    top, bottom = font.getbbox("H")[1], font.getbbox("H")[3]
    return max(bottom - top, 1) / size


def render(font_path, text: str, rng, crop: str, style: Plain = Plain()):
    """(uint8 line of style.height, the draws)."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    line = style.height * SUPER
    cap = float(rng.uniform(*CAP[crop]))
    size = max(8, round(cap * line / cap_ratio(font_path)))
    angle = float(rng.uniform(-style.rotate, style.rotate))
    shift = float(rng.uniform(-0.06, 0.06))
    margins = rng.uniform(*MARGIN[crop], 2)
    paper = rng.uniform(150, 250, 3)  # left-top, right, bottom corners' grey
    ink = float(rng.uniform(0, min(paper) - 60))
    blur = float(rng.uniform(0.3, 1.0)) if rng.random() < 0.5 else 0.0
    sigma = float(rng.uniform(0, 6))
    specks = float(rng.uniform(0, 0.003))
    font = ImageFont.truetype(str(font_path), size, layout_engine=ImageFont.Layout.BASIC)
    left, top, right, bottom = font.getbbox(text)
    pad = line
    mask = Image.new("L", (right - left + 2 * pad, bottom - top + 2 * pad), 0)
    ImageDraw.Draw(mask).text((pad - left, pad - top), text, font=font, fill=255)
    mask = mask.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True)
    a = np.asarray(mask)
    rows, cols = np.nonzero(a.max(axis=1))[0], np.nonzero(a.max(axis=0))[0]
    centre = (rows[0] + rows[-1]) / 2 + shift * line
    box_top = round(centre - line / 2)
    x0 = int(cols[0]) - round(margins[0] * line)
    x1 = int(cols[-1]) + 1 + round(margins[1] * line)
    cut = np.asarray(mask.crop((x0, box_top, x1, box_top + line)), dtype=np.float64) / 255
    h, w = cut.shape
    gx, gy = np.meshgrid(np.linspace(0, 1, w), np.linspace(0, 1, h))
    bg = paper[0] + (paper[1] - paper[0]) * gx + (paper[2] - paper[0]) * gy
    grey = bg + (ink - bg) * cut
    out_w = max(1, round(w / SUPER))
    img = Image.fromarray(np.clip(np.rint(grey), 0, 255).astype(np.uint8))
    img = img.resize((out_w, style.height), Image.Resampling.BOX)
    if blur:
        img = img.filter(ImageFilter.BoxBlur(blur))
    g = np.asarray(img, dtype=np.float64) + rng.normal(0, sigma, (style.height, out_w))
    spots = rng.random(g.shape)
    g[spots < specks / 2] = 0
    g[spots > 1 - specks / 2] = 255
    draws = {"crop": crop, "cap": round(cap, 4), "size": size, "angle": round(angle, 3),
             "paper": [round(float(p), 1) for p in paper], "ink": round(ink, 1),
             "blur": round(blur, 3), "noise": round(sigma, 3)}
    return np.clip(np.rint(g), 0, 255).astype(np.uint8), draws


def draw_line(font_path, words, style: Plain, seed: int, i: int, crop: str | None = None,
              draw=None):
    """(text, pixels, draws) of line i, from the generator of (seed, i); its crop tightness
    the i-th in turn unless given. draw: the renderer's render() (this module's by default;
    aggrender.py's for the third renderer): the words are drawn first, the same for both."""
    import numpy as np

    rng = np.random.default_rng([seed, i])
    n = int(rng.integers(1, style.words + 1))
    text = " ".join(words[int(k)] for k in rng.integers(0, len(words), n))
    text = text[:style.max_chars].strip() or words[0][:style.max_chars]
    crop = crop or CROPS[(i // 7) % len(CROPS)]
    pixels, draws = (draw or render)(font_path, text, rng, crop, style)
    return text, pixels, draws
