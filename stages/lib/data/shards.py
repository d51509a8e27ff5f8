"""Prepared data on disk as fixed-size shards, read by memory map: task-agnostic shard I/O.

Layout of data/processed/ (written by prepare, read by train, evaluate and export):

    meta.json                      the task's meta + image_size, channels, mean, std, counts,
                                   shard_size
    <split>/images-00000.npy       N stored samples as the modality decodes them (images: uint8
                                   N x H x W x C), N <= shard_size (only the last is short)
    <split>/targets-00000.npy      the task's targets of the same N samples (task.target_dtype)
    <split>/widths-00000.npy       prepare.width_buckets only: uint16 N, each line's bucket
                                   width (its values past it are the pad value)
    ...

Shard k holds samples [k * shard_size, (k + 1) * shard_size) of the split, in split order, so a
sample's shard is index // shard_size. Every file is a pure function of its rows, the params and
the code: the bytes are the same whatever the number of workers that wrote them, or the engine
(prepare's local workers and its Ray driver write them with the same ShardWriter).

Readers never hold a split in memory: `load_split` gives views that read the samples a batch
asks for with positioned reads from the shard files (the .npy header gives the offset), and the
normalised view converts per batch with the modality's normalize (stages/lib/modality/). Views
are picklable (files reopen in each DataLoader worker).
Only numpy here.
"""
import contextlib
import os
from pathlib import Path

import numpy as np

from stages.lib.modality import DEFAULT, get

# the shard files' kinds; "images" names every modality's stored samples (the file names are
# part of data/processed's bytes)
IMAGES, TARGETS, WIDTHS = "images", "targets", "widths"


def shard_name(kind: str, k: int) -> str:
    return f"{kind}-{k:05d}.npy"


def npy_header(shape, dtype) -> bytes:
    """np.save's header for an array of this shape and dtype: format 1.0 unless it does not
    fit (then 2.0), as np.save chooses."""
    import io

    fmt = np.lib.format
    d = fmt.header_data_from_array_1_0(np.empty(0, dtype))
    d["shape"] = tuple(shape)
    header = io.BytesIO()
    try:
        fmt.write_array_header_1_0(header, d)
    except ValueError:
        header = io.BytesIO()
        fmt.write_array_header_2_0(header, d)
    return header.getvalue()


def save_npy(path: Path, array, pending: bool = False):
    """One shard as .npy, through io.write_bytes: a temp file beside path, fsync, rename, and a
    full disk is a one-line error naming the path. (np.save straight into a file does not: its
    tofile() ignores a short write, so a full disk left a truncated shard and exit 0.) The
    bytes are np.save's: its header, then the array's own memory, written as it is (no copy
    into a buffer and another out of it: at 160 px RGB those two copies of a 75 MiB shard cost
    a quarter of its decode time), with O_DIRECT where the filesystem allows it (io's
    _write_direct: a fifth of the decode saved on ext4). pending: io.write_pending's, the temp
    file's path, left for io.commit to fsync and rename."""
    from stages.lib.io import write_bytes, write_pending

    array = np.ascontiguousarray(array)
    if array.dtype.hasobject:
        raise ValueError(f"{path}: object arrays are not stored in shards")
    parts = [npy_header(array.shape, array.dtype),
             memoryview(array.reshape(-1)).cast("B") if array.size else b""]
    if pending:
        return write_pending(path, parts, direct=True)
    return write_bytes(path, parts, direct=True)


class NpyBuffer:
    """A .npy file's bytes in one page-aligned buffer, the header in front of the array: an
    array decoded into it is already the file, which io.StreamedWrite sends to the disk as it
    fills (O_DIRECT from this memory, no copy). A ShardWriter reuses one for every shard it
    writes (fresh pages would cost 8-10% of the decode); made for the largest shape."""

    def __init__(self, shape, dtype):
        import mmap

        from stages.lib.io import _padded

        self.capacity, self.header_size = _nbytes(shape, dtype), len(npy_header(shape, dtype))
        self.memory = mmap.mmap(-1, _padded(self.header_size + self.capacity),
                                flags=mmap.MAP_PRIVATE)

    def fits(self, shape, dtype) -> bool:
        return (len(npy_header(shape, dtype)) == self.header_size
                and _nbytes(shape, dtype) <= self.capacity)

    def array(self, shape, dtype) -> np.ndarray:
        """The array part for this shape (its header written in front), to fill."""
        self.memory[:self.header_size] = npy_header(shape, dtype)
        return np.frombuffer(self.memory, dtype, int(np.prod(shape)),
                             self.header_size).reshape(shape)

    def file_size(self, shape, dtype) -> int:
        return self.header_size + _nbytes(shape, dtype)


def _nbytes(shape, dtype) -> int:
    return int(np.prod(shape)) * np.dtype(dtype).itemsize


class ShardWriter:
    """prepare's shard files under root, one shard at a time, for a local worker (which
    decodes each shard itself) and for the Ray driver (which copies in the chunks the cluster
    decoded): the images go straight into one NpyBuffer, reused for every shard (made for the
    first shape, and again for a larger one), and to the disk as it fills (io.StreamedWrite);
    the targets and widths follow (save_npy). Every file is left as a temp file: its (temp
    file, path) comes back for io.commit."""

    def __init__(self, root):
        self.root, self.buf = Path(root), None

    @contextlib.contextmanager
    def samples(self, split: str, k: int, shape):
        """Shard k's uint8 samples file of `shape` (N x H x W x C): yields a SamplesFile to
        fill (its x), telling it as it goes (filled); written on leaving (SamplesFile.written).
        An error inside removes the temp file."""
        from stages.lib.io import StreamedWrite

        if self.buf is None or not self.buf.fits(shape, np.uint8):
            self.buf = NpyBuffer(shape, np.uint8)
        buf = self.buf
        x = buf.array(shape, np.uint8)
        path = self.root / split / shard_name(IMAGES, k)
        with StreamedWrite(path, buf.memory, buf.file_size(shape, np.uint8)) as stream:
            shard = SamplesFile(x, stream, buf.header_size)
            yield shard
            shard.written = [(stream.finish(), str(path))]

    def targets(self, split: str, k: int, targets, widths=None) -> list:
        """Shard k's targets file, and its widths file unless widths is None: [(temp file,
        path)]."""
        files = [(TARGETS, targets)]
        if widths is not None:
            files.append((WIDTHS, widths))
        written = []
        for kind, array in files:
            path = self.root / split / shard_name(kind, k)
            written.append((save_npy(path, array, pending=True), str(path)))
        return written


class SamplesFile:
    """One shard's stored samples as ShardWriter.samples writes them: x, the array to fill;
    filled(i): the first i samples are final (their bytes go to the disk while the rest is
    filled)."""

    def __init__(self, x: np.ndarray, stream, header_size: int):
        self.x, self.stream, self.header_size = x, stream, header_size
        self.per_image = x.nbytes // len(x)
        self.written = []

    def filled(self, i: int) -> None:
        self.stream.advance(self.header_size + i * self.per_image)


def write_split(root, split: str, images, targets, shard_size: int) -> int:
    """Write in-memory arrays of one split as shards (tests and small tools); the count."""
    root = Path(root)
    for k, start in enumerate(range(0, len(images), shard_size)):
        save_npy(root / split / shard_name(IMAGES, k), images[start:start + shard_size])
        save_npy(root / split / shard_name(TARGETS, k), targets[start:start + shard_size])
    return len(images)


def write_processed(root, arrays: dict, meta: dict, shard_size: int = 1024) -> None:
    """A whole data/processed/ from in-memory {split: (uint8 images, targets)} and the meta
    (tests and tools; prepare writes shard by shard in worker processes)."""
    from stages.lib.io import write_json

    root = Path(root)
    counts = {split: write_split(root, split, x, y, shard_size) for split, (x, y) in arrays.items()}
    write_json(root / "meta.json", {**meta, "counts": {**meta.get("counts", {}), **counts},
                                     "shard_size": shard_size})


def shard_files(root, split: str) -> list[Path]:
    """Every shard file of a split, in order (images and targets)."""
    return sorted((Path(root) / split).glob("*.npy"))


class Split:
    """The shards of one split, read with positioned reads (os.preadv straight into the batch's
    buffer): a batch costs its own bytes, nothing of the split stays mapped into the process
    (so its RSS does not grow with the dataset, as it would with np.load(mmap_mode="r"), whose
    touched pages count as the process's resident memory). Files open on first use, in each
    process that reads (DataLoader workers reopen them: a pickled Split carries no handles)."""

    def __init__(self, root, split: str, count: int, shard_size: int):
        self.root, self.split = Path(root), split
        self.count, self.shard_size = count, shard_size
        self.shards = (count + shard_size - 1) // shard_size
        self._open = {}

    def __getstate__(self):
        return {**self.__dict__, "_open": {}}

    def __del__(self):
        for fd, *_ in getattr(self, "_open", {}).values():
            with contextlib.suppress(OSError):
                os.close(fd)

    def file(self, kind: str, k: int):
        """(fd, dtype, sample shape, data offset) of one shard file."""
        key = (kind, k)
        if key not in self._open:
            path = self.root / self.split / shard_name(kind, k)
            with open(path, "rb") as f:
                version = np.lib.format.read_magic(f)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, fortran, dtype = read_header(f)
                offset = f.tell()
            if fortran:
                raise ValueError(f"{path}: Fortran-ordered array; prepare writes C order")
            self._open[key] = (os.open(path, os.O_RDONLY), dtype, tuple(shape[1:]), offset)
        return self._open[key]

    def layout(self, kind: str):
        _, dtype, inner, _ = self.file(kind, 0)
        return dtype, inner

    def _read(self, kind, k, first, n, into) -> None:
        """Samples first..first+n of shard k into the contiguous array `into`."""
        fd, dtype, inner, offset = self.file(kind, k)
        size = dtype.itemsize * int(np.prod(inner, dtype=np.int64))
        want = size * n
        got = os.preadv(fd, [memoryview(into).cast("B")], offset + first * size)
        if got != want:
            raise OSError(f"{self.root / self.split / shard_name(kind, k)}: short read "
                          f"({got} of {want} bytes): the shard is truncated; rerun prepare")

    def gather(self, kind: str, key):
        """Samples `key` (int, slice, or a sequence/array of ints) as a new numpy array."""
        if isinstance(key, (int, np.integer)):
            i = int(key) + (self.count if key < 0 else 0)
            if not 0 <= i < self.count:
                raise IndexError(f"{self.split} sample {key} of {self.count}")
            return self.gather(kind, slice(i, i + 1))[0]
        dtype, inner = self.layout(kind)
        if isinstance(key, slice):
            start, stop, step = key.indices(self.count)
            if step == 1:
                stop = max(start, stop)
                out = np.empty((stop - start, *inner), dtype=dtype)
                at = start
                while at < stop:
                    k, first = divmod(at, self.shard_size)
                    n = min(stop - at, self.shard_size - first)
                    self._read(kind, k, first, n, out[at - start:at - start + n])
                    at += n
                return out
            key = range(start, stop, step)
        index = np.asarray(key, dtype=np.int64).reshape(-1)
        if len(index) and (index.min() < 0 or index.max() >= self.count):
            raise IndexError(f"{self.split} samples out of range 0..{self.count - 1}")
        out = np.empty((len(index), *inner), dtype=dtype)
        size = dtype.itemsize * int(np.prod(inner, dtype=np.int64))
        if not size or not len(index):
            return out
        # one positioned read per sample straight into its row of the batch, with nothing
        # but the read in the loop (a train batch is 64 random samples: the per-sample Python
        # around the syscall used to cost as much as the reads)
        rows = memoryview(out.reshape(-1)).cast("B")
        shards, firsts = np.divmod(index, self.shard_size)
        files = {int(k): self.file(kind, int(k)) for k in np.unique(shards)}
        for j, (k, first) in enumerate(zip(shards.tolist(), firsts.tolist(), strict=True)):
            fd, _, _, offset = files[k]
            got = os.preadv(fd, [rows[j * size:(j + 1) * size]], offset + first * size)
            if got != size:
                raise OSError(f"{self.root / self.split / shard_name(kind, k)}: short read "
                              f"({got} of {size} bytes): the shard is truncated; rerun prepare")
        return out


class View:
    """An indexable, picklable view of one split: `view[i]` one sample, `view[a:b]` or
    `view[indices]` a batch, as numpy (or torch tensors when torch=True). kind "images": the
    samples as stored; "x": the model's input, the modality's normalize of them (images:
    float32 NxCxHxW; per batch, the same floats as normalising the whole split); "targets":
    the stored targets. modality: the name of the task's (stages/lib/modality/)."""

    def __init__(self, split: Split, kind: str, mean=None, std=None, torch=False,
                 modality: str = DEFAULT):
        self.split, self.kind, self.mean, self.std, self.torch = split, kind, mean, std, torch
        self.modality = modality
        self.poisoned = set()  # sample indices read as +inf (train's POISON test hook)

    def __len__(self):
        return self.split.count

    @property
    def shape(self):
        dtype, inner = self.split.layout(IMAGES if self.kind == "x" else self.kind)
        if self.kind == "x":  # what normalize makes of a sample (images: C x H x W)
            inner = get(self.modality).normalize(np.zeros((0, *inner), dtype), self.mean,
                                                 self.std).shape[1:]
        return (self.split.count, *inner)

    def head(self, n: int) -> "View":
        """The first n samples (all when n is 0 or larger than the split)."""
        split = self.split
        if n and n < split.count:
            split = Split(split.root, split.split, n, split.shard_size)
        view = View(split, self.kind, self.mean, self.std, self.torch, self.modality)
        view.poisoned = self.poisoned
        return view

    def as_torch(self) -> "View":
        view = View(self.split, self.kind, self.mean, self.std, True, self.modality)
        view.poisoned = self.poisoned
        return view

    def __getitem__(self, key):
        if self.torch and hasattr(key, "numpy"):  # a torch index tensor
            key = key.numpy()
        one = isinstance(key, (int, np.integer))
        data = self.split.gather(IMAGES if self.kind == "x" else self.kind,
                                 slice(key, key + 1) if one and key >= 0 else key)
        if one and key < 0:
            data = data[None]
        if self.kind == "x":
            data = get(self.modality).normalize(data, self.mean, self.std)
            if self.poisoned:
                rows = np.arange(self.split.count)[key if not one else slice(key, key + 1)]
                for j, i in enumerate(np.atleast_1d(rows)):
                    if int(i) % self.split.count in self.poisoned:
                        data[j] = np.inf
        if one:
            data = data[0]
        if self.torch:
            import torch

            return torch.from_numpy(np.asarray(data))  # fresh, contiguous; 0-d for a scalar
        return data


class Mapped:
    """A view of stored samples (a View of kind "images") through fn, a function of a uint8
    batch, then normalised as a View of kind "x" normalises: `mapped[a:b]` a model-ready batch.
    What evaluate runs a task's test-time views (Task.views) on, a batch at a time."""

    def __init__(self, samples: View, fn, mean, std, modality: str = DEFAULT):
        self.samples, self.fn, self.mean, self.std = samples, fn, mean, std
        self.modality = modality

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, key):
        return get(self.modality).normalize(self.fn(self.samples[key]), self.mean, self.std)


def load_split(split: str, root="data/processed", torch=False, modality: str = DEFAULT):
    """(normalised input view, targets view, meta) of one split written by prepare, the
    inputs normalised by the modality of that name (the task's: Task.modality_name)."""
    from stages.lib.io import read_json

    root = Path(root)
    meta = read_json(root / "meta.json")
    if "shard_size" not in meta:
        raise FileNotFoundError(f"{root}/meta.json has no shards (written by an older prepare): "
                                f"run `dvc repro prepare` to rebuild {root}/")
    data = Split(root, split, meta["counts"][split], meta["shard_size"])
    x = View(data, "x", meta["mean"], meta["std"], torch, modality)
    y = View(data, TARGETS, torch=torch)
    return x, y, meta


def samples_view(split: str, root="data/processed") -> View:
    """The stored samples of one split (what the model saw, before normalising; images:
    uint8 NxHxWxC)."""
    from stages.lib.io import read_json

    meta = read_json(Path(root) / "meta.json")
    return View(Split(root, split, meta["counts"][split], meta["shard_size"]), IMAGES)


def load_widths(split: str, root="data/processed"):
    """Each sample's bucket width (numpy uint16 N) when prepare.width_buckets was set (meta.json
    width_buckets), else None. Two bytes a sample: a split's fits in memory."""
    from stages.lib.io import read_json

    meta = read_json(Path(root) / "meta.json")
    if not meta.get("width_buckets"):
        return None
    data = Split(root, split, meta["counts"][split], meta["shard_size"])
    return data.gather(WIDTHS, slice(0, data.count))


TEST_SPLIT = Path("data/split/test.csv")


def load_test(root="data/processed"):
    """(normalised images view, targets view, paths) of the test split, as evaluate and export
    read it: the paths from data/split/test.csv, checked against the shards' count."""
    from stages.lib.io import StageError, read_csv

    x, y, _ = load_split("test", root)
    paths = [r["path"] for r in read_csv(TEST_SPLIT)]
    if len(paths) != len(x) or not len(x):
        raise StageError(f"{TEST_SPLIT} lists {len(paths)} images but data/processed holds "
                         f"{len(x)} test images: run `dvc repro` to rebuild them.")
    return x, y, paths
