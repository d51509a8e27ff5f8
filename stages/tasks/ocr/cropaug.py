"""The crop of the line box as a training augmentation (train.aug_crop_line; 0 = off): a line
as a tighter or looser detector would have cut it, so a reader trained on lines of one crop
reads crops of any tightness (docs/ocr.md).

`draws(g)` takes two uniforms from the sample's (seed, epoch, index) generator after every
other OCR draw (augment.py, strokeaug.py), so with the knob at 0 nothing else moves and the
line is untouched, bit for bit. With a = aug_crop_line:

- zoom z = (1 + a) ** (2 u0 - 1), log-uniform in [1 / (1 + a), 1 + a]: z > 1 a tighter box
  (the text larger, its top and bottom may leave the frame), z < 1 a looser one (paper around);
- the box moved up or down by (2 u1 - 1) * a / 10 of the line's height;
- vertically about the line's middle; horizontally anchored at the left edge, by z, but never
  so far that the line's end leaves the frame: z_x = min(z, W / text width), where the text
  width is W less the trailing run of columns equal to the last one (prepare's right padding,
  one grey value); a line filling the frame so gets taller, not wider;
- what lies outside the line is the paper: the padding's grey, or the median of the border
  pixels when the line has no padding. Bilinear (grid_sample, align_corners=False).
"""


def draws(g):
    import torch

    return torch.rand(2, generator=g).tolist()


def text_width(x) -> tuple[int, float | None]:
    """(columns before the trailing padding, the padding's value or None when there is none):
    the trailing columns whose every pixel equals the last column's first pixel."""
    last = x[..., -1:]
    flat = (x == x[..., :1, -1:]).all(dim=-2).all(dim=0)  # W: column equals the pad value
    if not bool(flat[-1]):
        return x.shape[-1], None
    k = flat.shape[0]
    while k > 0 and bool(flat[k - 1]):
        k -= 1
    return max(k, 1), float(last.flatten()[0])


def paper(x) -> float:
    import torch

    border = torch.cat([x[..., 0, :].flatten(), x[..., -1, :].flatten(),
                        x[..., :, 0].flatten(), x[..., :, -1].flatten()])
    return float(border.median())


def augment(x, a: float, u):
    """x (C x H x W) with its line box cropped or padded by the draws u (draws())."""
    import torch
    import torch.nn.functional as F

    _, h, w = x.shape
    z = (1 + a) ** (2 * u[0] - 1)
    shift = (2 * u[1] - 1) * a / 10
    width, pad = text_width(x)
    fill = pad if pad is not None else paper(x)
    zx = min(z, w / width)
    # output -> input, normalised coordinates: x_in = (x_out + 1) / zx - 1, y_in = y_out / z
    # + 2 * shift
    theta = torch.tensor([[[1 / zx, 0.0, 1 / zx - 1], [0.0, 1 / z, 2 * shift]]],
                         dtype=x.dtype)
    grid = F.affine_grid(theta, [1, *x.shape], align_corners=False)
    out = F.grid_sample((x - fill)[None], grid, mode="bilinear", padding_mode="zeros",
                        align_corners=False)[0]
    return out + fill
