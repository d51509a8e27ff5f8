"""Batched image augmentation: the per-sample augmentations of imageaug.py (and of the tasks
that build on it) as tensor ops over a whole N x C x H x W batch, on the batch's device.

Each sample's parameters are drawn on the host exactly as the per-sample functions draw them:
a CPU generator seeded by the sample's (seed, epoch, index) seed, the same numbers in the same
order (`draws`). Only the parameters (a few numbers a sample) cross to the device, in one copy;
every pixel op then runs batched there. No tensor of pixels is made on the CPU.

Bytes against the per-sample functions (tests/test_augment_batch.py):
- flip, brightness/contrast jitter, noise, the boxes' arithmetic, the masks' nearest
  resampling and the rotations' nearest sampling: identical (the same float32 ops on the same
  values, element by element);
- bilinear crop-resize and zoom-out (resize_regions): within 1e-5 of F.interpolate, not
  identical: ATen's CPU kernel rounds its weights in its own vectorised order, which a gather
  cannot reproduce. So the CPU keeps the per-sample path by default (train.batch_augment auto)
  and its dvc.lock bytes do not move; the batched path runs on a GPU.

torch is imported inside the functions.
"""


def draws(seeds, k: int = 8, extra: int = 0):
    """(N x k uniforms, N x extra uniforms or None, the generators left after them): each
    sample's torch.rand(k) (then torch.rand(extra)) from a CPU generator seeded by its seed,
    as the per-sample augmentations draw them. The generators are returned so a task can
    draw what it draws next (OCR's noise) from the same streams."""
    import torch

    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
    u = torch.stack([torch.rand(k, generator=g) for g in gens]) if gens else torch.zeros(0, k)
    more = torch.stack([torch.rand(extra, generator=g) for g in gens]) if extra and gens \
        else None
    return u, more, gens


def crop_boxes(u, h: int, w: int, scale: float):
    """N x 4 int64 (top, left, height, width) of each sample's crop (imageaug.crop_box on its
    draws; host arithmetic on a few numbers a sample)."""
    import torch

    from stages.lib.modality.imageaug import crop_box

    return torch.tensor([crop_box(row, h, w, scale) for row in u.tolist()],
                        dtype=torch.int64).reshape(-1, 4)


def _axis(size, start, out_size, out, offset, device):
    """Bilinear source indices and weights along one axis, as F.interpolate's
    align_corners=False computes them (per sample: an input span of `size` from `start`,
    resampled to `out_size` output pixels placed from `offset` in an axis of `out`)."""
    import torch

    d = torch.arange(out, device=device, dtype=torch.float32)[None] - offset[:, None]
    scale = size.float() / out_size.float()
    src = (scale[:, None] * (d + 0.5) - 0.5).clamp(min=0)
    i0 = src.long()
    lam1 = src - i0.float()
    i1 = torch.minimum(i0 + 1, size[:, None] - 1)
    i0 = torch.minimum(i0, size[:, None] - 1)
    inside = (d >= 0) & (d < out_size[:, None].float())
    return (i0 + start[:, None]), (i1 + start[:, None]), 1 - lam1, lam1, inside


def resize_regions(x, boxes, placed=None):
    """Each sample's region boxes[n] = (top, left, height, width) of x (N x C x H x W)
    resized bilinearly (align_corners=False) to the full H x W, or with placed[n] = (top,
    left, height, width) to that window of a zero canvas (the zoom-out). A gather over the
    batch, on x's device; boxes and placed: int64 N x 4 (moved to x's device here)."""
    import torch

    n, c, h, w = x.shape
    dev = x.device
    boxes = boxes.to(dev)
    if placed is None:
        placed = torch.stack([torch.zeros_like(boxes[:, 0]), torch.zeros_like(boxes[:, 0]),
                              torch.full_like(boxes[:, 0], h), torch.full_like(boxes[:, 0], w)], 1)
    placed = placed.to(dev)
    y0, y1, wy0, wy1, iny = _axis(boxes[:, 2], boxes[:, 0], placed[:, 2], h, placed[:, 0], dev)
    x0, x1, wx0, wx1, inx = _axis(boxes[:, 3], boxes[:, 1], placed[:, 3], w, placed[:, 1], dev)
    flat = x.reshape(n, c, h * w)

    def at(yy, xx):
        idx = (yy.clamp(0, h - 1)[:, :, None] * w + xx.clamp(0, w - 1)[:, None, :])
        return flat.gather(2, idx.reshape(n, 1, h * w).expand(n, c, h * w)).reshape(n, c, h, w)

    wy0, wy1 = wy0[:, None, :, None], wy1[:, None, :, None]
    wx0, wx1 = wx0[:, None, None, :], wx1[:, None, None, :]
    out = (at(y0, x0) * wx0 + at(y0, x1) * wx1) * wy0 + (at(y1, x0) * wx0 + at(y1, x1) * wx1) * wy1
    inside = (iny[:, :, None] & inx[:, None, :])[:, None]
    return torch.where(inside, out, out.new_zeros(()))


def nearest_regions(y, boxes):
    """Each mask y[n] (N x H x W, any dtype) cropped to boxes[n] and resized back to H x W by
    F.interpolate's nearest-exact rule (floor((d + 0.5) * in / out), in float32)."""
    import torch

    n, h, w = y.shape
    dev = y.device
    boxes = boxes.to(dev)

    def idx(size, start, out):
        d = torch.arange(out, device=dev, dtype=torch.float32)
        scale = size.float() / out
        i = torch.floor((d[None] + 0.5) * scale[:, None]).long()
        return torch.minimum(i, size[:, None] - 1) + start[:, None]

    rows, cols = idx(boxes[:, 2], boxes[:, 0], h), idx(boxes[:, 3], boxes[:, 1], w)
    flat = y.reshape(n, h * w)
    return flat.gather(1, (rows[:, :, None] * w + cols[:, None, :]).reshape(n, -1)).reshape(n, h, w)


def flip(x, mask):
    """x (N x ... x W) with the samples where mask (N bools) is set mirrored left-right."""
    import torch

    m = mask.to(x.device).reshape(-1, *([1] * (x.dim() - 1)))
    return torch.where(m, x.flip(-1), x)


def affine(x, thetas, mode: str, fill):
    """torchvision.transforms.v2's rotate (no expand, centre of the image) of each sample by
    its inverse affine matrix thetas[n] (N x 6, torchvision's _get_inverse_affine_matrix), with
    `mode` sampling and fill (N x C) outside: its grid, batched."""
    import torch
    import torch.nn.functional as F

    n, c, h, w = x.shape
    dev, dtype = x.device, x.dtype
    theta = thetas.to(device=dev, dtype=dtype).reshape(n, 2, 3)
    base = torch.empty(1, h, w, 3, dtype=dtype, device=dev)
    base[..., 0].copy_(torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, steps=w, device=dev))
    base[..., 1].copy_(torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, steps=h,
                                      device=dev).unsqueeze_(-1))
    base[..., 2].fill_(1)
    scaled = theta.transpose(1, 2).div_(torch.tensor([0.5 * w, 0.5 * h], dtype=dtype, device=dev))
    grid = base.view(1, h * w, 3).expand(n, -1, -1).bmm(scaled).view(n, h, w, 2)
    img = torch.cat((x, torch.ones((n, 1, h, w), dtype=dtype, device=dev)), dim=1)
    img = F.grid_sample(img, grid, mode=mode, padding_mode="zeros", align_corners=False)
    img, mask = torch.tensor_split(img, indices=(-1,), dim=-3)
    mask = mask.expand_as(img)
    fill = fill.to(device=dev, dtype=dtype).reshape(n, c, 1, 1).expand_as(img)
    return torch.where(mask < 0.5, fill, img)


def rotation_thetas(angles):
    """N x 6 inverse affine matrices of torchvision's rotate for these angles (degrees)."""
    import torch
    from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

    return torch.tensor([_get_inverse_affine_matrix([0.0, 0.0], -(a % 360), [0.0, 0.0], 1.0,
                                                    [0.0, 0.0]) for a in angles],
                        dtype=torch.float32).reshape(-1, 6)


def rotate(x, angles, fill, mode: str = "nearest"):
    """Each sample rotated by angles[n] (a list of floats, degrees) as torchvision's rotate
    does it (nearest; angle 0 leaves the sample as it is), fill (N x C) outside."""
    import torch

    out = affine(x, rotation_thetas(angles), mode, fill)
    zero = torch.tensor([a % 360 == 0 for a in angles]).to(x.device)
    return torch.where(zero.reshape(-1, 1, 1, 1), x, out)


def jitter(x, contrast, brightness):
    """x * contrast[n] + brightness[n]: the per-sample jitter's two float32 ops."""
    shape = (-1, *([1] * (x.dim() - 1)))
    return x * contrast.to(x.device).reshape(shape) + brightness.to(x.device).reshape(shape)


def jitter_factors(u, j: float, a: int = 6, b: int = 7):
    """float32 (contrast, brightness) of each sample: 1 + (2 u[a] - 1) j and (2 u[b] - 1) j,
    in Python's double arithmetic as the per-sample functions compute them."""
    import torch

    rows = u.tolist()
    return (torch.tensor([1 + (2 * r[a] - 1) * j for r in rows], dtype=torch.float32),
            torch.tensor([(2 * r[b] - 1) * j for r in rows], dtype=torch.float32))


def augment_batch(x, p, seeds):
    """imageaug.augment of every sample of x (N x C x H x W, normalised, on any device), as
    batched ops; seeds: each sample's (seed, epoch, index) seed."""

    u, _, _ = draws(seeds)
    _, _, h, w = x.shape
    if p.aug_crop_scale < 1.0:
        x = resize_regions(x, crop_boxes(u, h, w, p.aug_crop_scale))
    if p.aug_hflip > 0:
        x = flip(x, u.double()[:, 4] < p.aug_hflip)
    if p.aug_rotate > 0:
        angles = [(2 * r[5] - 1) * p.aug_rotate for r in u.tolist()]
        fill = x.amin(dim=(1, 2, 3))[:, None].expand(-1, x.shape[1])
        x = rotate(x, angles, fill)
    if p.aug_jitter > 0:
        x = jitter(x, *jitter_factors(u, p.aug_jitter))
    return x if x.is_contiguous() else x.contiguous()


def per_sample(augment, x, y, p, seeds):
    """The fallback of a task with no batched augmentation: augment(x[i], y[i], p, seed) per
    sample, stacked (on the batch's device: the per-sample functions make no CPU tensor of
    pixels, but run one sample at a time)."""
    import torch

    pairs = [augment(xi, yi, p, int(s)) for xi, yi, s in zip(x, y, seeds, strict=True)]
    return torch.stack([a for a, _ in pairs]), torch.stack([b for _, b in pairs])
