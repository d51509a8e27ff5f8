"""Line augmentation: horizontal squeeze, small rotation with a perspective-like shear, blur,
contrast/brightness and pixel noise. Every draw comes from a generator seeded by the sample's
(seed, epoch, index) seed, always in the same order, so a knob switched on or off never moves
the draws of another. The transcript never changes: the squeeze is anchored at the left edge
and never stretches (that could push the line's end out of the frame). The stroke-changing
knobs (strokeaug.py) act after the rotation and before the blur and the noise; the crop of the
line box (cropaug.py, aug_crop_line) before everything, and the paper's gradient and specks
(paperaug.py, aug_gradient and aug_specks) after everything; at 0 they change nothing."""
import math

from stages.tasks.ocr import cropaug, paperaug, strokeaug


def augment(x, p, seed: int):
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(seed)
    u = torch.rand(8, generator=g).tolist()
    noise = torch.randn(x.shape, generator=g)
    more = strokeaug.draws(g, x.shape)  # after every older draw: those stay where they were
    box = cropaug.draws(g)  # after the stroke knobs' draws
    blemish = paperaug.draws(g, x.shape)  # after the crop's draws
    if p.aug_crop_line > 0:  # first: the other knobs act on the line as that box cut it
        x = cropaug.augment(x, p.aug_crop_line, box)
    c = x.shape[0]
    squeeze = 1 - u[0] * p.aug_stretch  # width factor in [1 - aug_stretch, 1]
    angle = math.radians((2 * u[1] - 1) * p.aug_rotate)
    shear = math.radians((2 * u[2] - 1) * p.aug_rotate) / 2
    if squeeze != 1 or angle or shear:
        cos, sin = math.cos(angle), math.sin(angle)
        theta = torch.tensor([[[cos / squeeze, -sin + shear, 1 / squeeze - 1],
                               [sin, cos, 0.0]]], dtype=x.dtype)
        grid = F.affine_grid(theta, [1, *x.shape], align_corners=False)
        x = F.grid_sample(x[None], grid, mode="bilinear", padding_mode="border",
                          align_corners=False)[0]
    if strokeaug.active(p):
        x = strokeaug.augment(x, p, more)
    if p.aug_blur > 0 and u[3] < p.aug_blur:
        k = torch.tensor([1.0, 2.0, 1.0], dtype=x.dtype)
        k = (k[:, None] * k[None, :] / 16).expand(c, 1, 3, 3)
        x = F.conv2d(F.pad(x[None], (1, 1, 1, 1), mode="replicate"), k, groups=c)[0]
    if p.aug_jitter > 0:
        j = p.aug_jitter
        x = x * (1 + (2 * u[4] - 1) * j) + (2 * u[5] - 1) * j + noise * (u[6] * j)
    if paperaug.active(p):
        x = paperaug.augment(x, p, blemish)
    return x


def augment_batch(x, p, seeds):
    """augment() of a batch of lines (N x C x H x W, on any device) as batched ops: each
    line's draws taken from its own generator as augment takes them (the noise too, drawn on
    the host and copied over with the other parameters). The squeeze, rotation and shear are
    one batched affine grid_sample, the blur one grouped convolution kept where drawn (line by
    line on the CPU, where the batched kernel rounds differently), the jitter and noise the
    same float32 ops: identical to augment on the CPU (tests/test_augment_batch.py).
    The stroke augmentations (strokeaug.py), when on, run line by line between them, and the
    line-box crop (cropaug.py) line by line before them, and the paper's blemishes
    (paperaug.py) line by line after everything (exact; not yet batched)."""
    import torch
    import torch.nn.functional as F

    from stages.lib.modality import imagebatch as ib

    n, c, h, w = x.shape
    dev = x.device
    u, _, gens = ib.draws(seeds)
    noise = torch.stack([torch.randn((c, h, w), generator=g) for g in gens]) if n else None
    more = [strokeaug.draws(g, (c, h, w)) for g in gens]
    boxes = [cropaug.draws(g) for g in gens]
    blemishes = [paperaug.draws(g, (c, h, w)) for g in gens]
    if p.aug_crop_line > 0:  # line by line, as augment (exact; not batched)
        x = torch.stack([cropaug.augment(xi, p.aug_crop_line, b)
                         for xi, b in zip(x, boxes, strict=True)]) if n else x
    rows = u.tolist()
    thetas, warp = [], []
    for r in rows:
        squeeze = 1 - r[0] * p.aug_stretch
        angle = math.radians((2 * r[1] - 1) * p.aug_rotate)
        shear = math.radians((2 * r[2] - 1) * p.aug_rotate) / 2
        cos, sin = math.cos(angle), math.sin(angle)
        thetas.append([[cos / squeeze, -sin + shear, 1 / squeeze - 1], [sin, cos, 0.0]])
        warp.append(bool(squeeze != 1 or angle or shear))
    if any(warp):
        theta = torch.tensor(thetas, dtype=x.dtype).to(dev)
        grid = F.affine_grid(theta, [n, c, h, w], align_corners=False)
        warped = F.grid_sample(x, grid, mode="bilinear", padding_mode="border",
                               align_corners=False)
        x = torch.where(torch.tensor(warp).to(dev)[:, None, None, None], warped, x)
    if strokeaug.active(p):
        x = torch.stack([strokeaug.augment(xi, p, d) for xi, d in zip(x, more, strict=True)])
    if p.aug_blur > 0:
        blur = [r[3] < p.aug_blur for r in rows]
        if any(blur):
            k = torch.tensor([1.0, 2.0, 1.0], dtype=x.dtype).to(dev)
            k = (k[:, None] * k[None, :] / 16).expand(c, 1, 3, 3)
            pad = F.pad(x, (1, 1, 1, 1), mode="replicate")
            if dev.type == "cpu":  # CPU: one line at a time, as augment (batched, the
                # convolution kernel sums in another order: other last bits)
                blurred = torch.cat([F.conv2d(pad[i:i + 1], k, groups=c) for i in range(n)])
            else:
                blurred = F.conv2d(pad, k, groups=c)
            x = torch.where(torch.tensor(blur).to(dev)[:, None, None, None], blurred, x)
    if p.aug_jitter > 0:
        j = p.aug_jitter
        a, b = ib.jitter_factors(u, j, 4, 5)
        scale = torch.tensor([r[6] * j for r in rows], dtype=x.dtype)
        x = ib.jitter(x, a, b) + noise.to(dev) * scale.to(dev).reshape(-1, 1, 1, 1)
    if paperaug.active(p) and n:  # line by line, as augment (exact; not batched)
        x = torch.stack([paperaug.augment(xi, p, d)
                         for xi, d in zip(x, blemishes, strict=True)])
    return x
