"""Batches built on the device (train.device_batches; on by default on a GPU, off on the CPU).

The CPU path (stages/lib/train/augment.py EpochBatches) reads each batch from the memory-mapped
shards, normalises and augments it sample by sample on the host, and the loop copies it over.
On a GPU that host work is the whole step. Here instead:

- the split's stored samples (uint8, a quarter of the normalised floats) are loaded once onto
  the device when they fit in train.device_data_share of its free memory (`resident`);
  otherwise each batch is gathered on the host by a background thread into pinned memory and
  copied ahead of the step that needs it (`ahead` batches in flight: memory stays bounded
  whatever the data size);
- the batch is normalised on the device (the modality's normalize_tensor, when it has one) and
  augmented there as one batch (Task.augment_batch), each sample's parameters still drawn
  from its (seed, epoch, index) generator.

The batches are those of EpochBatches, in its order (the same indices, the same bucket
widths): with batched augmentation off or exact, the same values.

torch is imported inside the functions.
"""
from collections import deque

from stages.lib.train.augment import augmenting, sample_seed

AHEAD = 2  # batches copied ahead of the step (streamed path)


def use_device_batches(p, device) -> bool:
    """train.device_batches: auto = on a GPU only (on the CPU the per-sample path keeps its
    bytes: the bilinear crop batched is within 1e-5 of it, not equal); on/off force it."""
    return p.device_batches == "on" or (p.device_batches == "auto" and device != "cpu")


def fits(nbytes: int, free_bytes: int, share: float) -> bool:
    """Whether a split of nbytes stays resident: at most share of the free memory."""
    return nbytes <= share * free_bytes


def free_bytes(device) -> int:
    """Free memory of the device (the GPU's, or the machine's available RAM on the CPU)."""
    import torch

    if device != "cpu":
        return torch.cuda.mem_get_info(torch.device(device))[0]
    from stages.lib.train.distributed import system_memory_bytes

    with open("/proc/meminfo") as f:  # MemAvailable, else the total
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return system_memory_bytes()


class Source:
    """The train split as the device path reads it: `raw` (a stages/lib/data/shards.py View of the
    stored samples, or an in-memory tensor already normalised), the targets, and how to turn a
    stored batch into model input on the device (`normalize`; None: already model input)."""

    def __init__(self, x, y, device, share: float, modality=None):
        import torch

        from stages.lib.data.shards import IMAGES, View

        self.device, self.normalize, self.mean, self.std = device, None, None, None
        norm = getattr(modality, "normalize_tensor", None) if modality is not None else None
        if isinstance(x, View) and norm is not None:  # uint8 as stored; normalised on device
            self.x = View(x.split, IMAGES, torch=True)
            self.x.poisoned = x.poisoned
            self.normalize, self.mean, self.std = norm, x.mean, x.std
        else:
            self.x = x
        self.y = y
        nbytes = sum(nbytes_of(v) for v in (self.x, self.y))
        self.resident = fits(nbytes, free_bytes(device), share)
        self.nbytes = nbytes
        if self.resident:
            with torch.no_grad():
                self.x_dev, self.y_dev = (to_device(v, device) for v in (self.x, self.y))

    def describe(self) -> str:
        mb = self.nbytes / 2 ** 20
        return (f"the train split ({mb:.0f} MiB) loaded once onto it" if self.resident else
                f"the train split ({mb:.0f} MiB) over train.device_data_share of its free "
                f"memory: streamed, {AHEAD} batches copied ahead through pinned memory")

    def host(self, idx, width):
        """One batch gathered on the host (a worker thread), pinned when a GPU takes it."""
        import torch

        x, y = self.x[idx], self.y[idx]
        x = cut(x, width, self.normalize is not None)
        if self.device != "cpu" and torch.cuda.is_available():
            x, y = x.pin_memory(), y.pin_memory()
        return x if torch.is_tensor(x) else torch.as_tensor(x), y

    def batches(self, ds, start: int, task, p, epoch: int):
        """(idx, x, y) of batches start.. of ds (an EpochBatches), on the device: normalised
        and augmented there."""
        import torch

        plan = [ds.batch_index(b) for b in range(start, len(ds))]
        augment = augmenting(p)
        stream = None if self.resident else prefetched(self, plan)
        for idx, width in plan:
            if self.resident:
                at = idx.to(self.device, non_blocking=True)
                x = cut(self.x_dev[at], width, self.normalize is not None)
                y = self.y_dev[at]
            else:
                x, y = next(stream)
            if self.normalize is not None:
                x = self.normalize(x, self.mean, self.std)
                if self.x.poisoned:  # train's POISON test hook, as the host view reads it
                    bad = torch.tensor([int(i) in self.x.poisoned for i in idx.tolist()])
                    x = torch.where(bad.to(x.device).reshape(-1, 1, 1, 1), float("inf"), x)
            if augment:
                seeds = [sample_seed(p.seed, epoch, i) for i in idx.tolist()]
                x, y = task.augment_batch(x, y, p, seeds)
                x = plain_strides(x)  # as the per-sample path's stacked samples
            yield idx, x, y


def prefetched(source: Source, plan):
    """The plan's batches copied to the device `AHEAD` ahead: a thread gathers each on the
    host (positioned reads release the GIL) into pinned memory, the copy is queued without
    waiting (non_blocking), so reading and copying overlap the steps."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        queue = deque()
        todo = iter(plan)

        def submit():
            item = next(todo, None)
            if item is not None:
                queue.append(pool.submit(source.host, *item))

        for _ in range(AHEAD):
            submit()
        while queue:
            x, y = queue.popleft().result()
            submit()
            yield (x.to(source.device, non_blocking=True),
                   y.to(source.device, non_blocking=True))


def plain_strides(x):
    """x with row-major strides: a one-channel batch normalised from N x H x W x 1 has a
    channel stride of 1, which torch's convolutions take for channels-last (other bits)."""
    import torch

    want, acc = [], 1
    for size in reversed(x.shape):
        want.insert(0, acc)
        acc *= size
    return x if list(x.stride()) == want else x.clone(memory_format=torch.contiguous_format)


def cut(x, width, stored: bool):
    """A batch cut to its bucket width (prepare.width_buckets): stored samples are N x H x W x C,
    model input N x C x H x W."""
    if width is None:
        return x
    return (x[:, :, :width] if stored else x[..., :width]).contiguous()


def to_device(v, device):
    """All of a view or tensor as one tensor on the device, copied a shard at a time (the host
    holds one shard, never the split)."""
    import torch

    if torch.is_tensor(v):
        return v.to(device)
    first = v[0:1]
    out = torch.empty((len(v), *first.shape[1:]), dtype=first.dtype, device=device)
    step = v.split.shard_size
    for a in range(0, len(v), step):
        out[a:a + step].copy_(v[a:a + step])
    return out


def nbytes_of(v) -> int:
    import numpy as np
    import torch

    if torch.is_tensor(v):
        return v.element_size() * v.numel()
    if v.kind == "x":  # normalised float32
        return 4 * int(np.prod(v.shape, dtype=np.int64))
    dtype, inner = v.split.layout(v.kind)
    return int(dtype.itemsize * np.prod(inner, dtype=np.int64)) * len(v)

