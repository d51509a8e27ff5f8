"""The paper's blemishes as a training augmentation (train.aug_gradient, train.aug_specks; 0 =
off): uneven light across the page, and dust, toner specks and holes, so a reader trained on
clean synthetic paper does not read a speck as a full stop or a shadow as a stroke
(docs/ocr.md).

`draws(g, shape)` takes five uniforms and an H x W field of uniforms from the sample's (seed,
epoch, index) generator after every other OCR draw (augment.py, strokeaug.py, cropaug.py),
always all of them, so with both knobs at 0 nothing else moves and the line is untouched, bit
for bit. Amplitudes are in the line's own grey range (max - min), so they mean the same on
normalised inputs. They act last, on the line as every other knob left it:

- aug_gradient = a: the paper's light changes linearly along the line and across it, by
  (2 u0 - 1) a and (2 u1 - 1) a grey ranges from one edge to the other (centred: the middle
  keeps its grey). The ink does not move: each pixel moves by its paper share, (x - ink) /
  (paper - ink) clipped to [0, 1], where the paper is the line's extreme on the side of its
  median (dark ink on light paper, or light ink on dark paper) and the ink the other extreme.
- aug_specks = s: a share u2 * s of the pixels becomes a speck, half of them the line's darkest
  grey (field < u2 s / 2), half its lightest (field > 1 - u2 s / 2), each one pixel, or 2 x 2
  pixels (when u3 < 1/2) grown to the right and down; the extremes are the line's after the
  gradient.
"""

N_U = 5  # uniform draws of this module (u4 spare, so a later knob does not move the field)


def draws(g, shape):
    import torch

    return {"u": torch.rand(N_U, generator=g).tolist(),
            "field": torch.rand(tuple(shape[-2:]), generator=g)}


def active(p) -> bool:
    return bool(p.aug_gradient or p.aug_specks)


def augment(x, p, d):
    """The line x (C x H x W float) with the paper's gradient and specks that are on."""
    import torch
    import torch.nn.functional as F

    u = d["u"]
    c, h, w = x.shape
    if p.aug_gradient:
        lo, hi = x.min(), x.max()
        light = bool(x.median() >= (lo + hi) / 2)
        paper, ink = (hi, lo) if light else (lo, hi)
        share = ((x - ink) / (paper - ink).clamp(min=1e-6) if light
                 else (ink - x) / (ink - paper).clamp(min=1e-6)).clamp(0, 1)
        gx = (2 * u[0] - 1) * p.aug_gradient
        gy = (2 * u[1] - 1) * p.aug_gradient
        xs = (torch.arange(w, dtype=x.dtype, device=x.device) + 0.5) / w - 0.5
        ys = (torch.arange(h, dtype=x.dtype, device=x.device) + 0.5) / h - 0.5
        ramp = gx * xs[None, :] + gy * ys[:, None]  # H x W, in grey ranges
        x = x + share * ramp * (hi - lo)
    if p.aug_specks:
        density = u[2] * p.aug_specks
        field = d["field"].to(x.device)
        marks = torch.stack([field < density / 2, field > 1 - density / 2]).to(x.dtype)
        if u[3] < 0.5:  # 2 x 2 specks: each mark grown one pixel right and down
            marks = F.max_pool2d(F.pad(marks[None], (1, 0, 1, 0)), 2, 1)[0]
        lo, hi = x.min(), x.max()
        x = torch.where(marks[0].bool(), lo, x)
        x = torch.where(marks[1].bool() & ~marks[0].bool(), hi, x)
    return x
