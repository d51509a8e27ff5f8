"""prepare.engine: ray (issue 31): a Ray cluster's tasks decode and resize, this process (the
driver) writes data/processed/ itself, the same files, byte for byte, as engine: local.

- The tasks run stages/prepare.py's own decode (decode_rows: prepare_split, the task's
  targets, the facts for the hints and auto mean/std); nothing is decoded twice or differently.
- Each task decodes a chunk of one shard (CHUNK rows); the driver takes the results in order
  and streams each into the shard being written (io.StreamedWrite from one NpyBuffer, as a
  local worker does), with at most `window` tasks in flight or done and not yet written. So
  the driver holds one shard's buffer and the cluster's object store at most `window` chunks,
  whatever the dataset's size: its peak RSS is flat in N (bench/ray_prepare.py measures it).
- Inputs are read where the tasks run: data.source, made absolute here, must be the same path
  on every node (a shared filesystem); a task that cannot find a file says so.
- Our code travels with the job (Ray's runtime_env py_modules: this checkout's stages/), so a
  cluster's nodes need Python and the requirements, not a copy of the project.
"""
from pathlib import Path

from stages.lib.io import StageError

CHUNK = 256  # rows per task: ~0.1 s of decode at small sizes, 20 MiB at 160 px RGB
STAGES = Path(__file__).resolve().parent.parent  # the `stages` package, shipped to the workers


def remote_spec(source: Path) -> tuple:
    """prepare.ray_inputs: remote: ("s3", the default DVC remote's URL, its endpointurl, the
    .dir hash of data.source in dvc.lock or <source>.dvc, data.source's absolute path): what a
    task needs to find each file the way `dvc push` stored it (files/md5/<2>/<30>); the path
    is for what a task's encoder reads itself (segmentation's masks). Credentials are not
    sent: each node uses its own (environment, config file or instance role, as boto3 finds
    them)."""
    import yaml
    from dvc.repo import Repo

    def outs():
        lock = Path("dvc.lock")
        if lock.exists():
            for stage in (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).values():
                yield from stage.get("outs", [])
        tracked = Path(f"{source}.dvc")
        if tracked.exists():
            yield from (yaml.safe_load(tracked.read_text()) or {}).get("outs", [])

    want = source.resolve()
    digest = next((o.get("md5", "") for o in outs()
                   if Path(o.get("path", "")).resolve() == want
                   and str(o.get("md5", "")).endswith(".dir")), "")
    if not digest:
        raise StageError(f"prepare.ray_inputs: remote: {source} is not a folder DVC tracks (no "
                         f"entry in dvc.lock or {source}.dvc): track it and `dvc push` it, or "
                         f"set prepare.ray_inputs to path (a shared filesystem)")
    with Repo(".") as repo:
        name = repo.config.get("core", {}).get("remote")
        remote = repo.config.get("remote", {}).get(name or "", {})
    url = str(remote.get("url", ""))
    if not url.startswith("s3://"):
        raise StageError(f"prepare.ray_inputs: remote needs a default DVC remote on S3 (`dvc "
                         f"remote add -d NAME s3://BUCKET/PATH`); the default is "
                         f"{url or 'not set'}")
    return ("s3", url, remote.get("endpointurl") or "", digest, str(want))


class RemoteTree:
    """data.source's files on the DVC remote's S3, opened by path (`tree / "cat/1.png"`: the
    file's bytes, a file object), found through data.source's .dir listing (fetched once)."""

    def __init__(self, url: str, endpoint: str, digest: str):
        import json

        import boto3

        self.url = url
        self.bucket, _, prefix = url.removeprefix("s3://").partition("/")
        self.prefix = prefix.strip("/")
        self.s3 = boto3.client("s3", endpoint_url=endpoint or None)
        self.files = {e["relpath"]: e["md5"] for e in json.loads(self.read(digest))}

    def read(self, digest: str) -> bytes:
        key = "/".join(p for p in (self.prefix, "files", "md5", digest[:2], digest[2:]) if p)
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self.s3.exceptions.NoSuchKey:
            raise FileNotFoundError(2, "not on the DVC remote (dvc push it)",
                                    f"{self.url}/{key}") from None

    def __truediv__(self, path):
        import errno
        import io

        digest = self.files.get(str(path))
        if digest is None:
            raise FileNotFoundError(errno.ENOENT, "not in data.source as DVC tracks it",
                                    f"{self.url}: {path}")
        return io.BytesIO(self.read(digest))

    def __str__(self):
        return self.url


def _call(name: str, job):
    """A Ray task: stages.prepare's function `name` on one job (looked up by name in the
    worker: the driver's stages.prepare may be __main__, which Ray would pickle by value)."""
    import importlib

    return getattr(importlib.import_module("stages.prepare"), name)(job)


class StorePages:
    """Gives back this process's mappings of the object store's pages a result was read from.
    ray.get maps a large result straight from the store's shared memory (/dev/shm/plasma...,
    a shared mapping), and every page of it the driver reads stays counted in its RSS after
    the object is gone: the driver's RSS would grow with the bytes read, up to the store's
    size. After a chunk is copied into its shard, madvise(MADV_DONTNEED) drops those pages
    from this process only (a shared mapping keeps its data; another read faults it back in).
    Nothing is done for a result held in this process's own memory (a small, inlined one)."""

    def __init__(self):
        self.ranges = []

    def store_ranges(self) -> list:
        out = []
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and "plasma" in parts[5] and parts[1].endswith("s"):
                    lo, hi = (int(v, 16) for v in parts[0].split("-"))
                    out.append((lo, hi))
        return out

    def release(self, array) -> None:
        import ctypes
        import mmap

        if not hasattr(mmap, "MADV_DONTNEED") or not array.nbytes:
            return
        start = array.ctypes.data
        end = start + array.nbytes
        inside = [r for r in self.ranges if r[0] <= start and end <= r[1]]
        if not inside:
            self.ranges = self.store_ranges()
            inside = [r for r in self.ranges if r[0] <= start and end <= r[1]]
        page = mmap.PAGESIZE
        first, last = -(-start // page) * page, end // page * page  # the whole pages only
        if inside and last > first:
            ctypes.CDLL(None, use_errno=True).madvise(
                ctypes.c_void_p(first), ctypes.c_size_t(last - first), mmap.MADV_DONTNEED)


class RayEngine:
    """A connection to a Ray cluster that runs prepare's jobs; shut down as a pool is. The
    stage passes itself in (`stage`: stages.prepare, for source_path, OUT_DIR and
    decode_rows): stages/lib sits below the stages and never imports them."""

    def __init__(self, address: str, num_cpus: int, source: Path, stage):
        from stages.lib import raycluster

        self.address, self.source, self.stage = address, source, stage
        try:
            self.ray = raycluster.connect(address, num_cpus,
                                          runtime_env={"py_modules": [str(STAGES)]})
        except ConnectionError as exc:
            raise StageError(f"prepare.ray_address: {exc}; fix prepare.ray_address in "
                             f"params.yaml (or -S prepare.ray_address=HOST:6379)") from None
        resources = self.ray.cluster_resources()
        self.cpus = max(1, int(resources.get("CPU", 1)))
        self.nodes = len([n for n in self.ray.nodes() if n.get("Alive")])
        self.window = 2 * self.cpus + 2  # every CPU busy, one result waiting behind each
        self.remote = self.ray.remote(num_cpus=1, max_retries=3)(_call)
        self.pending = []

    def describe(self) -> str:
        where = self.address or "a local cluster"
        return (f"Ray at {where}: {self.cpus} CPU{'s' if self.cpus > 1 else ''} on "
                f"{self.nodes} node{'s' if self.nodes > 1 else ''}")

    def imap(self, func, jobs):
        """func(job) of every job, in the cluster, yielded in the jobs' order; at most
        self.window submitted and not yet yielded."""
        from collections import deque

        pending = self.pending = deque()
        for job in jobs:
            pending.append(self.remote.remote(func.__name__, job))
            if len(pending) >= self.window:
                yield self.get(pending.popleft())
        while pending:
            yield self.get(pending.popleft())

    def get(self, ref):
        """A task's result; its error as the worker raised it (a file missing there: where
        the data must live)."""
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:
            source_path = self.stage.source_path
            cause = getattr(exc, "cause", None)
            if isinstance(cause, FileNotFoundError) and str(cause.filename).startswith("s3:"):
                raise StageError(f"{cause.filename}: {cause.strerror}: prepare.ray_inputs: "
                                 f"remote reads data.source's files as the last `dvc push` "
                                 f"left them; push them again (dvc push)") from None
            if isinstance(cause, FileNotFoundError):
                raise StageError(
                    f"{cause.filename}: not found by a Ray worker. With prepare.engine: ray "
                    f"the workers read data.source at {source_path(self.source)}, the path it "
                    f"has here: put the data on a filesystem every node mounts at that path "
                    f"(NFS, a shared volume) and set data.source to it, or push it and set "
                    f"prepare.ray_inputs: remote.") from None
            if isinstance(cause, BaseException):
                raise cause from None
            raise

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Cancel what is still in flight (on an error), and leave the cluster (a local one
        stops)."""
        from stages.lib import raycluster

        if cancel_futures:
            for ref in self.pending:
                try:
                    self.ray.cancel(ref)
                except Exception:  # noqa: BLE001 (done or gone already: nothing to cancel)
                    pass
        self.pending = []
        raycluster.disconnect()

    def write_shards(self, splits, setup, shard_size: int, sample: tuple, norm: bool) -> tuple:
        """prepare.write_shards' files and facts, decoded in the cluster, written here shard
        by shard, in order, each streamed to the disk as its chunks come back. sample: one
        stored sample's shape (the modality's input_shape), the channel last."""
        import numpy as np
        from tqdm import tqdm

        from stages.lib.io import StreamedWrite, commit
        from stages.lib.shards import IMAGES, TARGETS, WIDTHS, NpyBuffer, save_npy, shard_name
        OUT_DIR, decode_rows = self.stage.OUT_DIR, self.stage.decode_rows  # noqa: N806

        sides_from = "train" if len(splits.get("train", ())) else None  # else every split's
        # (split, shard, first row, rows): the rows are sliced as they are sent, never all
        shards = [(name, k, start, min(shard_size, len(rows) - start))
                  for name, rows in splits.items()
                  for k, start in enumerate(range(0, len(rows), shard_size))]
        jobs = ((setup, name, splits[name][i:min(i + CHUNK, start + n)],
                 sides_from in (None, name))
                for name, _, start, n in shards for i in range(start, start + n, CHUNK))
        results = self.imap(decode_rows, jobs)
        channels = sample[-1]
        bar = tqdm(total=sum(len(r) for r in splits.values()), desc="prepare (ray)",
                   unit="img", disable=None)
        sides, colour, counts = [], 0, np.zeros((channels, 256), dtype=np.int64)
        buf, pages = None, StorePages()
        for name, k, _, n in shards:
            shape = (n, *sample)
            if buf is None or not buf.fits(shape, np.uint8):
                buf = NpyBuffer(shape, np.uint8)
            x = buf.array(shape, np.uint8)
            per_image = x.nbytes // len(x)
            path = OUT_DIR / name / shard_name(IMAGES, k)
            targets, widths, done = [], [], 0
            with StreamedWrite(path, buf.memory, buf.file_size(shape, np.uint8)) as images:
                while done < n:
                    cx, cy, cw, (c_sides, c_colour, c_counts) = next(results)
                    x[done:done + len(cx)] = cx
                    pages.release(cx)
                    done += len(cx)
                    images.advance(buf.header_size + done * per_image)
                    targets.append(cy)
                    widths.append(cw)
                    sides += c_sides
                    colour += c_colour
                    if c_counts is not None:
                        counts += c_counts
                    bar.update(len(cx))
                    del cx, cy, cw  # the object store may free the chunk now
                written = [(images.finish(), str(path))]
            files = [(TARGETS, np.concatenate(targets))]
            if widths[0] is not None:
                files.append((WIDTHS, np.concatenate(widths)))
            for kind, array in files:
                out = OUT_DIR / name / shard_name(kind, k)
                written.append((save_npy(out, array, pending=True), str(out)))
            for tmp, out in written:
                commit(tmp, out)
        bar.close()
        return (sides, colour), (counts if norm else None)
