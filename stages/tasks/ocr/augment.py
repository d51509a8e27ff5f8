"""Line augmentation: horizontal squeeze, small rotation with a perspective-like shear, blur,
contrast/brightness and pixel noise. Every draw comes from a generator seeded by the sample's
(seed, epoch, index) seed, always in the same order, so a knob switched on or off never moves
the draws of another. The transcript never changes: the squeeze is anchored at the left edge
and never stretches (that could push the line's end out of the frame). The stroke-changing
knobs (strokeaug.py) act after the rotation and before the blur and the noise; at 0 they change
nothing."""
import math

from stages.tasks.ocr import strokeaug


def augment(x, p, seed: int):
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(seed)
    u = torch.rand(8, generator=g).tolist()
    noise = torch.randn(x.shape, generator=g)
    more = strokeaug.draws(g, x.shape)  # after every older draw: those stay where they were
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
    return x
