"""Detection augmentation: the boxes move with the pixels.

Eight uniform numbers per sample from a generator seeded by (seed, epoch, index), always drawn
in the same order (like stages/lib/augment.py): a random crop (area fraction in
[train.aug_crop_scale, 1], aspect 3/4..4/3) resized back to the full size, with the boxes
shifted, scaled, clipped to the crop and dropped when under 2 px or under 40% of their area
is left; a horizontal flip (train.aug_hflip) mirroring the boxes; brightness/contrast jitter
(train.aug_jitter). train.aug_rotate is not applied to boxes (it would loosen them): ignored.
"""


def augment(x, y, p, seed: int):
    import torch

    from stages.lib.augment import crop_box

    u = torch.rand(8, generator=torch.Generator().manual_seed(seed)).tolist()
    _, h, w = x.shape
    y = y.clone()
    valid = y[:, 0] >= 0
    if p.aug_crop_scale < 1.0:
        top, left, ch, cw = crop_box(u, h, w, p.aug_crop_scale)
        crop = x[None, :, top:top + ch, left:left + cw]
        x = torch.nn.functional.interpolate(crop, size=(h, w), mode="bilinear",
                                            align_corners=False)[0]
        before = (y[:, 3] - y[:, 1]) * (y[:, 4] - y[:, 2])
        sx, sy = w / cw, h / ch
        y[:, [1, 3]] = ((y[:, [1, 3]] - left) * sx).clamp(0, w)
        y[:, [2, 4]] = ((y[:, [2, 4]] - top) * sy).clamp(0, h)
        bw, bh = y[:, 3] - y[:, 1], y[:, 4] - y[:, 2]
        kept = (bw >= 2) & (bh >= 2) & (bw * bh >= 0.4 * before * sx * sy)
        valid = valid & kept
    if p.aug_hflip > 0 and u[4] < p.aug_hflip:
        x = x.flip(-1)
        y[:, [1, 3]] = w - y[:, [3, 1]]
    if p.aug_jitter > 0:
        x = x * (1 + (2 * u[6] - 1) * p.aug_jitter) + (2 * u[7] - 1) * p.aug_jitter
    y[~valid] = -1
    return x, y
