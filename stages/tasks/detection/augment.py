"""Detection augmentation: the boxes move with the pixels.

Eight uniform numbers per sample from a generator seeded by (seed, epoch, index), always drawn
in the same order (like stages/lib/train/augment.py): a random crop (area fraction in
[train.aug_crop_scale, 1], aspect 3/4..4/3) resized back to the full size, with the boxes
shifted, scaled, clipped to the crop and dropped when under 2 px or under 40% of their area
is left; a horizontal flip (train.aug_hflip) mirroring the boxes; brightness/contrast jitter
(train.aug_jitter). train.aug_rotate is not applied to boxes (it would loosen them): ignored.
With train.aug_zoom_out > 1, three more numbers from the same generator: half the images shrink
by a factor in [1, aug_zoom_out] onto a canvas of the normalised mean (0) at a random place, the
boxes with them (dropped under 2 px): small objects for the detector to learn from.
"""


def augment(x, y, p, seed: int):
    import torch

    from stages.lib.modality.imageaug import crop_box

    generator = torch.Generator().manual_seed(seed)
    u = torch.rand(8, generator=generator).tolist()
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
    if p.aug_zoom_out > 1:
        z = torch.rand(3, generator=generator).tolist()
        if z[0] < 0.5:
            x, y, valid = zoom_out(x, y, valid, 1 + (p.aug_zoom_out - 1) * 2 * z[0], z[1:])
    y[~valid] = -1
    return x, y


def zoom_out(x, y, valid, factor: float, at):
    """x (C x H x W) shrunk by factor onto a zero canvas at the place at (two uniforms), and
    its boxes y [class, x1, y1, x2, y2] with it; boxes under 2 px are no longer valid."""
    import torch

    _, h, w = x.shape
    nh, nw = max(1, round(h / factor)), max(1, round(w / factor))
    top, left = int(at[0] * (h - nh + 1)), int(at[1] * (w - nw + 1))
    small = torch.nn.functional.interpolate(x[None], size=(nh, nw), mode="bilinear",
                                            align_corners=False)[0]
    x = torch.zeros_like(x)
    x[:, top:top + nh, left:left + nw] = small
    y[:, [1, 3]] = left + y[:, [1, 3]] * (nw / w)
    y[:, [2, 4]] = top + y[:, [2, 4]] * (nh / h)
    valid = valid & (y[:, 3] - y[:, 1] >= 2) & (y[:, 4] - y[:, 2] >= 2)
    return x, y, valid


def augment_batch(x, y, p, seeds):
    """augment() of every sample of a batch (x: N x C x H x W, y: N x K x 5 boxes, on any
    device) as batched ops (stages/lib/modality/imagebatch.py): the same draws per sample, the
    same float32 arithmetic on the boxes (identical), the crop and the zoom-out resampled by a
    gather (within 1e-5 of the per-sample interpolate)."""
    import torch

    from stages.lib.modality import imagebatch as ib

    u, z, _ = ib.draws(seeds, 8, 3 if p.aug_zoom_out > 1 else 0)
    n, _, h, w = x.shape
    dev = x.device
    y = y.clone()
    valid = y[..., 0] >= 0
    col = lambda v: v.to(device=dev, dtype=y.dtype)[:, None]  # noqa: E731 (N -> N x 1)
    if p.aug_crop_scale < 1.0:
        boxes = ib.crop_boxes(u, h, w, p.aug_crop_scale)
        x = ib.resize_regions(x, boxes)
        top, left, ch, cw = boxes.unbind(1)
        before = (y[..., 3] - y[..., 1]) * (y[..., 4] - y[..., 2])
        sx = col(torch.tensor([w / c for c in cw.tolist()], dtype=torch.float32))
        sy = col(torch.tensor([h / c for c in ch.tolist()], dtype=torch.float32))
        y[..., [1, 3]] = ((y[..., [1, 3]] - col(left)[..., None]) * sx[..., None]).clamp(0, w)
        y[..., [2, 4]] = ((y[..., [2, 4]] - col(top)[..., None]) * sy[..., None]).clamp(0, h)
        bw, bh = y[..., 3] - y[..., 1], y[..., 4] - y[..., 2]
        kept = (bw >= 2) & (bh >= 2) & (bw * bh >= 0.4 * before * sx * sy)
        valid = valid & kept
    if p.aug_hflip > 0:
        flips = (u.double()[:, 4] < p.aug_hflip).to(dev)
        x = ib.flip(x, flips)
        mirrored = w - y[..., [3, 1]]
        y[..., [1, 3]] = torch.where(flips[:, None, None], mirrored, y[..., [1, 3]])
    if p.aug_jitter > 0:
        x = ib.jitter(x, *ib.jitter_factors(u, p.aug_jitter))
    if p.aug_zoom_out > 1:
        rows = z.tolist()
        zoom = [r[0] < 0.5 for r in rows]
        placed, ratios = [], []
        for r, on in zip(rows, zoom, strict=True):
            factor = 1 + (p.aug_zoom_out - 1) * 2 * r[0] if on else 1.0
            nh, nw = max(1, round(h / factor)), max(1, round(w / factor))
            placed.append((int(r[1] * (h - nh + 1)), int(r[2] * (w - nw + 1)), nh, nw))
            ratios.append((nw / w, nh / h))
        placed = torch.tensor(placed, dtype=torch.int64)
        whole = torch.tensor([[0, 0, h, w]] * n, dtype=torch.int64).reshape(n, 4)
        on = torch.tensor(zoom).to(dev)
        x = torch.where(on[:, None, None, None], ib.resize_regions(x, whole, placed), x)
        rx = col(torch.tensor([r[0] for r in ratios], dtype=torch.float32))[..., None]
        ry = col(torch.tensor([r[1] for r in ratios], dtype=torch.float32))[..., None]
        zy = y.clone()
        zy[..., [1, 3]] = col(placed[:, 1])[..., None] + y[..., [1, 3]] * rx
        zy[..., [2, 4]] = col(placed[:, 0])[..., None] + y[..., [2, 4]] * ry
        zvalid = valid & (zy[..., 3] - zy[..., 1] >= 2) & (zy[..., 4] - zy[..., 2] >= 2)
        y = torch.where(on[:, None, None], zy, y)
        valid = torch.where(on[:, None], zvalid, valid)
    y[~valid] = -1
    return x.contiguous(), y
