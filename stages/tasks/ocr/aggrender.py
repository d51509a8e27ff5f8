"""A third line renderer, to test on (tools.ocr_testlines --renderer agg): neither the training
generator (synth.py) nor the second renderer (plainrender.py) drew its lines, and it shares
neither's rasteriser nor blemishes, so it shows how much of what a reader learned from the one
and scored on the other holds beyond both.

The line's outlines come from matplotlib's TextPath (the font's curves, no hinting, no Pillow)
and are filled by matplotlib's Agg rasteriser at 4x the line height. The crop tightness of each
line is `tight` (the ink's height 0.78-0.95 of the line, ascenders to descenders), `medium`
(0.6-0.78) or `loose` (0.42-0.6), the box centred on the ink moved up to 5% of the height, side
margins per tightness. Paper and ink are flat greys (no gradient, no specks); the line is
reduced to `height` (Pillow's BICUBIC), Gaussian-blurred with probability 1/2, gets Gaussian
noise, and is JPEG-compressed at quality 25-90 (Pillow's libjpeg) and decoded. Every draw comes
from a numpy PCG64 generator seeded by (seed, i)."""
from dataclasses import dataclass

INK = {"tight": (0.78, 0.95), "medium": (0.6, 0.78), "loose": (0.42, 0.6)}
MARGIN = {"tight": (0.0, 0.15), "medium": (0.1, 0.4), "loose": (0.3, 0.8)}  # line heights
SUPER = 4  # the outlines are filled at SUPER x the line height


@dataclass(frozen=True)
class Agg:
    height: int = 32
    words: int = 3
    max_chars: int = 16


def coverage(font_path, text: str, size: float, pad: int):
    """(H x W float coverage in [0, 1] of text's outlines at `size` px, its ink box (x0, y0,
    x1, y1) in that array's pixels, y down)."""
    import numpy as np
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextPath
    from matplotlib.transforms import Affine2D

    path = TextPath((0, 0), text, size=size, prop=FontProperties(fname=str(font_path)))
    box = path.get_extents()
    w = int(np.ceil(box.width)) + 2 * pad
    h = int(np.ceil(box.height)) + 2 * pad
    renderer = RendererAgg(w, h, 72)
    gc = renderer.new_gc()
    gc.set_linewidth(0)
    gc.set_antialiased(True)
    shift = Affine2D().translate(pad - box.x0, pad - box.y0)  # display y runs up
    renderer.draw_path(gc, path, shift, (0.0, 0.0, 0.0, 1.0))
    gc.restore()
    alpha = np.asarray(renderer.buffer_rgba())[..., 3].astype(np.float64) / 255
    ink = (pad, pad, pad + box.width, pad + box.height)
    return alpha, ink


def render(font_path, text: str, rng, crop: str, style: Agg = Agg()):
    """(uint8 line of style.height, the draws)."""
    import io

    import numpy as np
    from PIL import Image, ImageFilter

    line = style.height * SUPER
    frac = float(rng.uniform(*INK[crop]))
    shift = float(rng.uniform(-0.05, 0.05))
    margins = rng.uniform(*MARGIN[crop], 2)
    paper = float(rng.uniform(170, 250))
    ink_grey = float(rng.uniform(0, paper - 90))
    blur = float(rng.uniform(0.3, 0.9)) if rng.random() < 0.5 else 0.0
    sigma = float(rng.uniform(0, 5))
    quality = int(rng.integers(25, 91))
    # the ink box's height is about 1.2 font sizes with ascenders and descenders; the outlines
    # are drawn at the size that gives the drawn share exactly (measured, then scaled)
    probe = coverage(font_path, text, 100.0, 0)[1]
    size = 100.0 * frac * line / max(probe[3] - probe[1], 1e-6)
    cov, (x0, y0, x1, y1) = coverage(font_path, text, size, line)
    centre = (y0 + y1) / 2 + shift * line
    top = int(round(centre - line / 2))
    left = int(round(x0 - margins[0] * line))
    right = int(round(x1 + margins[1] * line))
    cut = cov[top:top + line, left:right]
    grey = paper + (ink_grey - paper) * cut
    img = Image.fromarray(np.clip(np.rint(grey), 0, 255).astype(np.uint8))
    out_w = max(1, round(img.size[0] / SUPER))
    img = img.resize((out_w, style.height), Image.Resampling.BICUBIC)
    if blur:
        img = img.filter(ImageFilter.GaussianBlur(blur))
    g = np.asarray(img, dtype=np.float64) + rng.normal(0, sigma, (style.height, out_w))
    img = Image.fromarray(np.clip(np.rint(g), 0, 255).astype(np.uint8))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    pixels = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("L"))
    draws = {"crop": crop, "ink_height": round(frac, 4), "size": round(float(size) / SUPER, 3),
             "paper": round(paper, 1), "ink": round(ink_grey, 1), "blur": round(blur, 3),
             "noise": round(sigma, 3), "jpeg_quality": quality}
    return pixels, draws


def draw_line(font_path, words, style: Agg, seed: int, i: int, crop: str | None = None):
    """(text, pixels, draws) of line i: plainrender's draw of the words and crop, this
    renderer's pixels."""
    from stages.tasks.ocr import plainrender

    return plainrender.draw_line(font_path, words, style, seed, i, crop, draw=render)
