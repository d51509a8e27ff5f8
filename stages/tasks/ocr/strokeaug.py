"""Augmentations that change the strokes, not only the geometry (train.aug_stroke, aug_shear,
aug_aspect, aug_elastic, aug_texture, aug_downscale, aug_jpeg; every default 0 = off).

`draws(g, shape)` takes this module's random numbers from the sample's generator after the
older augmentations' draws, always all of them and in the same order, so switching a knob on
or off never moves another's draws, and with every knob at 0 the line is the older
augmentation's, bit for bit (the OCR sample's outs keep their bytes). Amplitudes are in units
of the line's own grey range (max - min), so they mean the same on normalised inputs.

- aug_stroke: probability of a grey-level erosion or dilation (3x3 min or max filter, blended
  by a random strength in [0.5, 1]): thinner or bolder strokes, whichever the ink's polarity.
- aug_shear: an italic shear, tangent drawn up to aug_shear either side (x += t * y).
- aug_aspect: the text's height scaled by [1 - aug_aspect, 1] about the line's middle (a lower
  x-height and a wider aspect; never taller, so nothing leaves the frame).
- aug_elastic: a smooth random displacement (3 x 9 control points, bilinear), up to
  aug_elastic pixels: local warps of the strokes.
- aug_texture: paper texture, smooth noise (4 x 24 control points) with a standard deviation
  of up to aug_texture grey ranges.
- aug_downscale: downscale by up to aug_downscale (factor 1 - u * aug_downscale) and back up
  (bilinear): the soft, blocky strokes of a low-resolution scan.
- aug_jpeg: probability of JPEG-like artefacts: each 8x8 block's DCT coefficients quantised
  with a step of 0.05-0.25 grey ranges (higher frequencies coarser), then transformed back.
"""
import math

N_U = 12  # uniform draws of this module


def draws(g, shape):
    import torch

    return {"u": torch.rand(N_U, generator=g).tolist(),
            "field": torch.randn(2, 3, 9, generator=g),
            "texture": torch.randn(1, 4, 24, generator=g)}


def active(p) -> bool:
    return any((p.aug_stroke, p.aug_shear, p.aug_aspect, p.aug_elastic, p.aug_texture,
                p.aug_downscale, p.aug_jpeg))


def _span(x):
    return (x.max() - x.min()).clamp_min(1e-6)


def _dct_matrix(n: int = 8):
    import torch

    k = torch.arange(n, dtype=torch.float64)
    m = torch.cos(math.pi * (2 * k[None, :] + 1) * k[:, None] / (2 * n)) * math.sqrt(2 / n)
    m[0] /= math.sqrt(2)
    return m


def jpeg_like(x, step: float):
    """8x8 blockwise DCT, coefficients rounded to multiples of step * (1 + (i + j) / 4) grey
    ranges, inverse DCT (float64, then back to x's dtype); edge blocks padded by replication."""
    import torch
    import torch.nn.functional as F

    c, h, w = x.shape
    ph, pw = -h % 8, -w % 8
    y = F.pad(x[None].double(), (0, pw, 0, ph), mode="replicate")[0]
    lo, span = y.min(), _span(y)
    y = (y - lo) / span
    blocks = y.reshape(c, (h + ph) // 8, 8, (w + pw) // 8, 8).permute(0, 1, 3, 2, 4)
    d = _dct_matrix()
    coef = d @ blocks @ d.T
    i = torch.arange(8, dtype=torch.float64)
    q = step * (1 + (i[:, None] + i[None, :]) / 4)
    coef = torch.round(coef / q) * q
    y = (d.T @ coef @ d).permute(0, 1, 3, 2, 4).reshape(c, h + ph, w + pw)
    return (y * span + lo)[:, :h, :w].to(x.dtype)


def augment(x, p, d):
    """The line x (C x H x W float) under the knobs that are on, from the draws d."""
    import torch
    import torch.nn.functional as F

    u = d["u"]
    c, h, w = x.shape
    if p.aug_stroke and u[0] < p.aug_stroke:
        pooled = F.max_pool2d(x[None] if u[1] < 0.5 else -x[None], 3, 1, 1)[0]
        pooled = pooled if u[1] < 0.5 else -pooled
        x = x + (0.5 + 0.5 * u[2]) * (pooled - x)
    shear = (2 * u[3] - 1) * p.aug_shear
    vscale = 1 - u[4] * p.aug_aspect
    if shear or vscale != 1:  # output (x, y) reads input (x + shear * y * h / w, y / vscale)
        theta = torch.tensor([[[1.0, shear * h / w, 0.0], [0.0, 1 / vscale, 0.0]]],
                             dtype=x.dtype)
        grid = F.affine_grid(theta, [1, c, h, w], align_corners=False)
        x = F.grid_sample(x[None], grid, mode="bilinear", padding_mode="border",
                          align_corners=False)[0]
    if p.aug_elastic:
        field = F.interpolate(d["field"][None].to(x.dtype), size=(h, w), mode="bilinear",
                              align_corners=True)[0]  # 2 x H x W, about N(0, 1) smooth
        scale = torch.tensor([2 / w, 2 / h], dtype=x.dtype)[:, None, None] * p.aug_elastic / 2
        base = F.affine_grid(torch.eye(2, 3, dtype=x.dtype)[None], [1, c, h, w],
                             align_corners=False)[0]
        grid = base + (field * scale).permute(1, 2, 0)
        x = F.grid_sample(x[None], grid[None], mode="bilinear", padding_mode="border",
                          align_corners=False)[0]
    if p.aug_texture:
        tex = F.interpolate(d["texture"][None].to(x.dtype), size=(h, w), mode="bicubic",
                            align_corners=True)[0]
        x = x + tex * (p.aug_texture * u[5] * _span(x))
    if p.aug_downscale:
        f = 1 - u[6] * p.aug_downscale
        small = (max(1, round(h * f)), max(1, round(w * f)))
        if small != (h, w):
            x = F.interpolate(F.interpolate(x[None], size=small, mode="bilinear",
                                            align_corners=False, antialias=True),
                              size=(h, w), mode="bilinear", align_corners=False)[0]
    if p.aug_jpeg and u[7] < p.aug_jpeg:
        x = jpeg_like(x, 0.05 + 0.2 * u[8])
    return x
