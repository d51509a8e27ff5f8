"""Seeded training randomness: the epoch's order and per-sample augmentation.

Every random draw is a pure function of (seed, epoch, sample index): the epoch's permutation
comes from a generator seeded by (seed, epoch), each sample's augmentation (task.augment; by
default its modality's, e.g. stages/lib/modality/imageaug.py) from one seeded by (seed, epoch,
index), and it always runs at one thread (one_thread). So a resumed run needs no sampler state,
and the number of DataLoader workers (which fetch batches in any process, in any order) cannot
change the result.

torch is imported inside the functions.
"""
import contextlib

MIX = 1_000_003


def epoch_order(n: int, seed: int, epoch: int):
    """The permutation of range(n) used in this epoch."""
    import torch

    g = torch.Generator().manual_seed(seed * MIX + epoch)
    return torch.randperm(n, generator=g)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    return ((seed * MIX + epoch) * 2_147_483_647 + index) % (2 ** 63)


# the OCR line knobs (stages/lib/params.py Train): each one on, alone, switches augmentation on
LINE_KNOBS = ("aug_stretch", "aug_blur", "aug_stroke", "aug_shear", "aug_aspect",
              "aug_elastic", "aug_texture", "aug_downscale", "aug_jpeg", "aug_crop_line",
              "aug_gradient", "aug_specks")


def augmenting(p) -> bool:
    """True when any augmentation in the train params is on (the audio modality's SpecAugment
    and room and microphone keys among them)."""
    from stages.lib.modality.audioroom import active

    spec = (getattr(p, "aug_time_mask", 0) > 0 or getattr(p, "aug_freq_mask", 0) > 0
            or getattr(p, "aug_freq_shift", 0) > 0) and getattr(p, "aug_masks", 2) >= 0
    return (p.aug_crop_scale < 1.0 or p.aug_hflip > 0 or p.aug_rotate > 0 or p.aug_jitter > 0
            or spec or active(p) or any(getattr(p, key, 0) > 0 for key in LINE_KNOBS)
            or getattr(p, "aug_zoom_out", 1.0) > 1.0)


def bucket_batches(n: int, widths, batch_size: int, seed: int, epoch: int, rank: int = 0,
                   world: int = 1):
    """This rank's batches of one epoch when samples come in width buckets (prepare's
    width_buckets): [(sample indices, width)], every batch from one bucket.

    A pure function of (seed, epoch, widths): the epoch's order (epoch_order), stable-partitioned
    by bucket (narrowest first), cut into global batches of batch_size, and the batch list
    shuffled by a generator seeded by (seed, epoch); so a checkpoint's batch index names the
    same batch on resume. With world ranks each global batch is padded with its own first
    samples to a multiple of world (as DistributedSampler pads) and split rank::world: every
    rank trains on the same bucket at each step, and every sample comes once per epoch."""
    import numpy as np
    import torch

    order = epoch_order(n, seed, epoch).numpy()
    w = np.asarray(widths)[order]
    out = []
    for width in sorted(set(w.tolist())):
        members = order[w == width]  # stable: the epoch's order within the bucket
        out += [(members[i:i + batch_size], width) for i in range(0, len(members), batch_size)]
    g = torch.Generator().manual_seed(sample_seed(seed, epoch, -1))  # no sample's seed
    plan = []
    for b in torch.randperm(len(out), generator=g).tolist():
        idx, width = out[b]
        if world > 1:
            idx = np.concatenate([idx, idx[:(-len(idx)) % world]])[rank::world]
        plan.append((torch.from_numpy(idx.astype(np.int64)), int(width)))
    return plan


class EpochBatches:
    """Batch b of one epoch on one rank: the samples `indices[b*bs:(b+1)*bs]`, augmented by
    task.augment (input and target together; classification: its modality's augment, target
    unchanged).

    With plan (bucket_batches' [(indices, width)]), batch b is plan[b]'s samples cut to its
    width (before augmentation), and indices/batch_size are unused.

    Indexable and picklable, so DataLoader workers can fetch any batch in any process.
    Returns (sample indices, x, y).
    """

    def __init__(self, x, y, indices, batch_size: int, p, epoch: int, task, plan=None):
        self.x, self.y, self.indices = x, y, indices
        self.batch_size, self.p, self.epoch, self.task = batch_size, p, epoch, task
        self.augment = augmenting(p)
        self.plan = plan

    def __len__(self):
        if self.plan is not None:
            return len(self.plan)
        return (len(self.indices) + self.batch_size - 1) // self.batch_size

    def batch_index(self, b):
        """(sample indices, bucket width or None) of batch b: what __getitem__ reads."""
        if self.plan is not None:
            return self.plan[b]
        return self.indices[b * self.batch_size:(b + 1) * self.batch_size], None

    def __getitem__(self, b):
        import torch

        if self.plan is not None:
            idx, width = self.plan[b]
            x = self.x[idx][..., :width].contiguous()
            rows = list(x)
        else:
            idx = self.indices[b * self.batch_size:(b + 1) * self.batch_size]
            if not self.augment:
                return idx, self.x[idx], self.y[idx]
            rows = [self.x[i] for i in idx.tolist()]
        if not self.augment:
            return idx, x, self.y[idx]
        with one_thread():
            pairs = [self.task.augment(xi, self.y[i], self.p,
                                       sample_seed(self.p.seed, self.epoch, i))
                     for xi, i in zip(rows, idx.tolist(), strict=True)]
        return idx, torch.stack([x for x, _ in pairs]), torch.stack([y for _, y in pairs])


@contextlib.contextmanager
def one_thread():
    """torch at one intra-op thread inside, as in a DataLoader worker. torch's CPU kernels
    (bilinear interpolation among them: the crop, the zoom-out) round differently depending on
    how their rows are split over threads, so an augmentation run at the trainer's thread count
    in the main process (train.num_workers 0) and at one thread in a worker gave different
    values, and other weights. At one thread everywhere, the augmented bytes depend neither on
    train.num_workers nor on train.threads or the machine's cores."""
    import torch

    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def batches(ds: EpochBatches, start: int, num_workers: int):
    """Iterate ds from batch `start`; with workers through a DataLoader (same batches)."""
    if num_workers == 0:
        return (ds[b] for b in range(start, len(ds)))
    import torch
    from torch.utils.data import DataLoader

    # its own generator, so creating the loader never draws from the global RNG
    return DataLoader(ds, batch_size=None, sampler=range(start, len(ds)),
                      num_workers=num_workers, generator=torch.Generator().manual_seed(0))
