"""Training-time pieces that see the mask: augmentation moving image and mask together, and the
validation sums (loss and per-image mIoU)."""
import torch

IGNORE = 255


def augment(x, y, p, seed: int):
    """The shared train.aug_* augmentations (stages/lib/train/augment.py, the same eight draws)
    applied to the normalised CxHxW image and, geometrically, to its HxW mask: the crop and rotation
    resample the mask by nearest neighbour (rotation fills it with the ignore value), the flip
    flips both, the jitter touches the image only."""

    from stages.lib.modality.imageaug import crop_box

    u = torch.rand(8, generator=torch.Generator().manual_seed(seed)).tolist()
    _, h, w = x.shape
    if p.aug_crop_scale < 1.0:
        top, left, ch, cw = crop_box(u, h, w, p.aug_crop_scale)
        x = torch.nn.functional.interpolate(x[None, :, top:top + ch, left:left + cw],
                                            size=(h, w), mode="bilinear", align_corners=False)[0]
        crop = y[None, None, top:top + ch, left:left + cw].float()
        y = torch.nn.functional.interpolate(crop, size=(h, w), mode="nearest-exact")[0, 0]
        y = y.to(torch.uint8)
    if p.aug_hflip > 0 and u[4] < p.aug_hflip:
        x, y = x.flip(-1), y.flip(-1)
    if p.aug_rotate > 0:
        from torchvision.transforms.v2 import functional as tvf

        angle = (2 * u[5] - 1) * p.aug_rotate
        x = tvf.rotate(x, angle, fill=[float(x.min())] * x.shape[0])
        y = tvf.rotate(y[None].float(), angle, fill=[float(IGNORE)])[0].to(y.dtype)
    if p.aug_jitter > 0:
        x = x * (1 + (2 * u[6] - 1) * p.aug_jitter) + (2 * u[7] - 1) * p.aug_jitter
    return x.contiguous(), y.contiguous()


def pixel_nll(outputs, targets):
    """N x H x W: each pixel's cross-entropy, -log softmax(outputs)[target], 0 where the
    target is IGNORE. The same quantity as F.cross_entropy(reduction="none",
    ignore_index=IGNORE), computed as the log-softmax times a one-hot mask summed over the
    classes: elementwise ops and a sum, deterministic on every device. (torch's pixel NLL,
    nll_loss2d, has no deterministic CUDA kernel: under train.deterministic it raises.)"""
    import torch.nn.functional as F

    t = targets.long()
    valid = t != IGNORE
    logp = F.log_softmax(outputs, 1)
    onehot = F.one_hot(t * valid, outputs.shape[1]).permute(0, 3, 1, 2).to(logp.dtype)
    return -(logp * onehot).sum(1) * valid


def loss(outputs, targets):
    """The mean pixel cross-entropy over the pixels that are not IGNORE (F.cross_entropy's
    mean with ignore_index; NaN when every pixel is ignored, as there)."""
    valid = targets != IGNORE
    return pixel_nll(outputs, targets).sum() / valid.sum()


def val_sums(outputs, targets) -> tuple:
    """(sum over images of the mean pixel cross-entropy, sum over images of the image's mIoU
    over the classes in its truth or prediction)."""
    outputs = outputs.float()
    t = targets.long()
    valid = t != IGNORE
    ce = pixel_nll(outputs, t)  # 0 at ignored pixels
    per_image = ce.flatten(1).sum(1) / valid.flatten(1).sum(1).clamp(min=1)
    k = outputs.shape[1]
    pred = outputs.argmax(1)
    miou = 0.0
    for i in range(len(t)):
        keep = valid[i]
        cm = torch.bincount(t[i][keep] * k + pred[i][keep], minlength=k * k).reshape(k, k)
        tp = cm.diag().double()
        union = cm.sum(0) + cm.sum(1) - cm.diag()
        present = union > 0
        miou += float((tp[present] / union[present]).mean()) if present.any() else 1.0
    return float(per_image.sum()), miou


def augment_batch(x, y, p, seeds):
    """augment() of a batch (x: N x C x H x W, y: N x H x W uint8 masks, on any device) as
    batched ops (stages/lib/modality/imagebatch.py): the masks' nearest crop, the flips, the
    rotations (nearest, the mask filled with IGNORE) and the jitter give the per-sample bytes;
    the image's bilinear crop is within 1e-5 of them."""
    from stages.lib.modality import imagebatch as ib

    u, _, _ = ib.draws(seeds)
    n, c, h, w = x.shape
    if p.aug_crop_scale < 1.0:
        boxes = ib.crop_boxes(u, h, w, p.aug_crop_scale)
        x = ib.resize_regions(x, boxes)
        y = ib.nearest_regions(y, boxes)
    if p.aug_hflip > 0:
        flips = u.double()[:, 4] < p.aug_hflip
        x, y = ib.flip(x, flips), ib.flip(y, flips)
    if p.aug_rotate > 0:
        angles = [(2 * r[5] - 1) * p.aug_rotate for r in u.tolist()]
        fill = x.amin(dim=(1, 2, 3))[:, None].expand(-1, c)
        x = ib.rotate(x, angles, fill)
        ignore = torch.full((n, 1), float(IGNORE), device=x.device)
        y = ib.rotate(y[:, None].float(), angles, ignore)[:, 0].to(y.dtype)
    if p.aug_jitter > 0:
        x = ib.jitter(x, *ib.jitter_factors(u, p.aug_jitter))
    return x.contiguous(), y.contiguous()
