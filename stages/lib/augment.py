"""Seeded training randomness: the epoch's order and per-sample augmentation.

Every random draw is a pure function of (seed, epoch, sample index): the epoch's permutation
comes from a generator seeded by (seed, epoch), each sample's augmentation from one seeded by
(seed, epoch, index). So a resumed run needs no sampler state, and the number of DataLoader
workers (which fetch batches in any process, in any order) cannot change the result.

torch (and torchvision, only when rotation is on) are imported inside the functions.
"""
MIX = 1_000_003


def epoch_order(n: int, seed: int, epoch: int):
    """The permutation of range(n) used in this epoch."""
    import torch

    g = torch.Generator().manual_seed(seed * MIX + epoch)
    return torch.randperm(n, generator=g)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    return ((seed * MIX + epoch) * 2_147_483_647 + index) % (2 ** 63)


def augmenting(p) -> bool:
    """True when any augmentation in the train params is on."""
    return (p.aug_crop_scale < 1.0 or p.aug_hflip > 0 or p.aug_rotate > 0 or p.aug_jitter > 0
            or getattr(p, "aug_stretch", 0) > 0 or getattr(p, "aug_blur", 0) > 0)


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


class EpochBatches:
    """Batch b of one epoch on one rank: the samples `indices[b*bs:(b+1)*bs]`, augmented by the
    task (image and target together; classification: augment() above, target unchanged).

    Indexable and picklable, so DataLoader workers can fetch any batch in any process.
    Returns (sample indices, x, y).
    """

    def __init__(self, x, y, indices, batch_size: int, p, epoch: int, task=None):
        if task is None:
            from stages.tasks import default_task

            task = default_task()
        self.x, self.y, self.indices = x, y, indices
        self.batch_size, self.p, self.epoch, self.task = batch_size, p, epoch, task
        self.augment = augmenting(p)

    def __len__(self):
        return (len(self.indices) + self.batch_size - 1) // self.batch_size

    def __getitem__(self, b):
        import torch

        idx = self.indices[b * self.batch_size:(b + 1) * self.batch_size]
        if not self.augment:
            return idx, self.x[idx], self.y[idx]
        pairs = [self.task.augment(self.x[i], self.y[i], self.p,
                                   sample_seed(self.p.seed, self.epoch, i)) for i in idx.tolist()]
        return idx, torch.stack([x for x, _ in pairs]), torch.stack([y for _, y in pairs])


def batches(ds: EpochBatches, start: int, num_workers: int):
    """Iterate ds from batch `start`; with workers through a DataLoader (same batches)."""
    if num_workers == 0:
        return (ds[b] for b in range(start, len(ds)))
    import torch
    from torch.utils.data import DataLoader

    # its own generator, so creating the loader never draws from the global RNG
    return DataLoader(ds, batch_size=None, sampler=range(start, len(ds)),
                      num_workers=num_workers, generator=torch.Generator().manual_seed(0))
