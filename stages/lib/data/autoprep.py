"""prepare's `auto` settings: when the input shape is chosen, and the normalisation.

Every choice is a deterministic function of the split files and the dataset's bytes (no
sampling, no floating-point sums whose order could vary), so `dvc repro` reproduces it bit for
bit, with one line saying what was chosen and why. The shape (size and channels) is the task's
modality's to choose from the headers (`choose_shape`; images: stages/lib/modality/imagefit.py);
the normalisation is the same for every modality whose stored samples are uint8 with the
channel last:

- mean/std: a list of one value applies to every channel (the committed [0.5] / [0.5] fits grey
  and colour data alike, so only the shape follows the data by default).
- mean/std auto: per channel, over every value of the prepared train split (after decoding,
  conversion and resizing: exactly what the model sees), computed from exact integer sums and
  rounded to 4 decimals.
"""
from stages.lib.params import AUTO


def needs_headers_first(p, size) -> bool:
    """The size (the modality's given_size: images' prepare.image_size) or channels auto: the
    headers decide them before anything is decoded. With both explicit, prepare's workers
    collect the same facts while decoding (for the hints)."""
    return size == AUTO or p.channels == AUTO


def check_norm(p, channels: int) -> None:
    """Explicit mean/std must have one value per (resolved) channel, or one for all."""
    if p.mean != AUTO and len(p.mean) not in (1, channels):
        from stages.lib.io import StageError

        raise StageError(f"prepare.mean and prepare.std have {len(p.mean)} value(s) but "
                         f"prepare.channels is {channels}: give one value per channel (or one "
                         f"for every channel), or set both to auto")


def value_counts(x):
    """(channels, 256) int64: how many of each channel's values equal each of 0..255, of a uint8
    array of N stored samples, the channel last. Exact integers: counts of any shards in any
    order add up to the same."""
    import numpy as np

    channels = x.shape[-1]
    counts = np.zeros((channels, 256), dtype=np.int64)
    for start in range(0, len(x), 64):  # 64 samples at a time: bincount widens to int64
        flat = x[start:start + 64].reshape(-1, channels)
        for c in range(channels):
            counts[c] += np.bincount(flat[:, c], minlength=256)
    return counts


def resolve_norm(p, channels: int, train_images=None, counts=None) -> tuple:
    """(mean, std, line): the params' values, or the train split's when auto, from `counts`
    (value_counts summed over the train shards, as prepare's workers give them) or else from
    train_images() (an iterable of uint8 arrays of stored samples, the channel last)."""
    check_norm(p, channels)
    if p.mean != AUTO:  # one value is every channel's
        mean, std = (list(v) * (channels if len(v) == 1 else 1) for v in (p.mean, p.std))
        return mean, std, (f"prepare.mean/std: {mean} / {std} "
                           f"(params.yaml; auto uses the train split's)")
    import numpy as np

    if counts is None:
        counts = np.zeros((channels, 256), dtype=np.int64)
        for x in train_images():
            counts = counts + value_counts(x)
    values = np.arange(256, dtype=np.int64)
    total = [int((counts[c] * values).sum()) for c in range(channels)]  # exact integers
    squares = [int((counts[c] * values * values).sum()) for c in range(channels)]
    n = int(counts[0].sum()) if channels else 0
    mean, std = [], []
    for c in range(channels):  # exact integers up to here; one division per value
        m = total[c] / (n * 255)
        var = max(0.0, squares[c] / (n * 255 * 255) - m * m)
        mean.append(round(m, 4))
        std.append(max(round(var ** 0.5, 4), 0.0001))  # a constant channel: never divide by 0
    return mean, std, (f"prepare.mean/std: {mean} / {std} (auto: per channel over "
                       f"{n} train pixels)")
