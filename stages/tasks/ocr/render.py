"""Text drawn with the package's own glyphs (glyphs.py), for the bad-cases sheet: no font, so
CJK shows the same on every machine and the PNG bytes depend only on numpy and Pillow."""
import numpy as np

from stages.tasks.ocr.glyphs import GLYPHS

UNKNOWN = "###### #....# #....# #....# #....# #....# #....# #....# #....# #....# ######"


def strip(text: str) -> np.ndarray:
    """float 11 x w ink of text (a box for a character without a glyph)."""
    parts = [np.zeros((11, 2))]
    for ch in text:
        if ch == " ":
            parts.append(np.zeros((11, 4)))
            continue
        rows = GLYPHS.get(ch, UNKNOWN).split(" ")
        parts += [np.array([[c == "#" for c in r] for r in rows], dtype=np.float64),
                  np.zeros((11, 1))]
    return np.concatenate(parts, axis=1)


def bad_cases_png(images, truths, preds, scale: int = 2) -> bytes:
    """A contact sheet: per line the image the model saw, then `truth` and `prediction` drawn
    in black and red."""
    import io

    from PIL import Image

    rows = []
    for img, truth, pred in zip(images, truths, preds, strict=True):
        grey = np.asarray(img)[..., 0].astype(np.float64)
        grey = np.kron(grey, np.ones((scale, scale))) if scale > 1 else grey
        rgb = np.repeat(grey[..., None], 3, axis=2)
        lines = [rgb]
        for text, colour in ((truth, (0, 0, 0)), (pred, (200, 0, 0))):
            ink = np.kron(strip(text), np.ones((scale, scale)))
            block = 255 - ink[..., None] * (255 - np.array(colour, dtype=np.float64))
            lines.append(block)
        width = max(a.shape[1] for a in lines)
        lines = [np.pad(a, ((0, 0), (0, width - a.shape[1]), (0, 0)), constant_values=255)
                 for a in lines]
        rows.append(np.concatenate([*lines, np.full((6, width, 3), 255.0)]))
    width = max(r.shape[1] for r in rows)
    sheet = np.concatenate([np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0)),
                                   constant_values=255) for r in rows])
    buf = io.BytesIO()
    Image.fromarray(np.clip(sheet, 0, 255).astype(np.uint8), "RGB").save(buf, format="PNG")
    return buf.getvalue()
