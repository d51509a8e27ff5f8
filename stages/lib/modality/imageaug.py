"""The image modality's default augmentation of one model input, and the crop every task's
augmentation shares (stages/lib/train/augment.py seeds it: a pure function of seed, epoch and
index).

torch (and torchvision, only when rotation is on) are imported inside the functions.
"""


def crop_box(u, h: int, w: int, scale: float) -> tuple[int, int, int, int]:
    """(top, left, height, width) of a random resized crop of an h x w image, from the
    uniform draws u[0:4]: area fraction in [scale, 1], aspect ratio 3/4..4/3. Every task's
    augmentation crops with it, so image and target always take the same box."""
    import math

    area = scale + (1 - scale) * u[0]
    ratio = math.exp(math.log(3 / 4) + (math.log(4 / 3) - math.log(3 / 4)) * u[1])
    cw = min(w, max(1, round(math.sqrt(area * ratio) * w)))
    ch = min(h, max(1, round(math.sqrt(area / ratio) * h)))
    return int(u[2] * (h - ch + 1)), int(u[3] * (w - cw + 1)), ch, cw


def augment(x, p, seed: int):
    """Augment one normalised CxHxW float tensor with the train.aug_* params.

    Eight uniform numbers are drawn per sample, always in the same order, so switching one
    augmentation on or off never shifts the draws of another.
    """

    import torch

    u = torch.rand(8, generator=torch.Generator().manual_seed(seed)).tolist()
    _, h, w = x.shape
    if p.aug_crop_scale < 1.0:
        top, left, ch, cw = crop_box(u, h, w, p.aug_crop_scale)
        crop = x[None, :, top:top + ch, left:left + cw]
        x = torch.nn.functional.interpolate(crop, size=(h, w), mode="bilinear",
                                            align_corners=False)[0]
    if p.aug_hflip > 0 and u[4] < p.aug_hflip:
        x = x.flip(-1)
    if p.aug_rotate > 0:
        from torchvision.transforms.v2 import functional as tvf

        angle = (2 * u[5] - 1) * p.aug_rotate
        x = tvf.rotate(x, angle, fill=[float(x.min())] * x.shape[0])
    if p.aug_jitter > 0:  # contrast and brightness on the normalised values
        x = x * (1 + (2 * u[6] - 1) * p.aug_jitter) + (2 * u[7] - 1) * p.aug_jitter
    return x
