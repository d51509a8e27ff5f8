"""prepare.engine: ray (issue 31): a Ray cluster's tasks decode and resize, this process (the
driver) writes data/processed/ itself, the same files, byte for byte, as engine: local.

- The tasks run prepare's own decode (stages/prepare_jobs.py decode_rows: prepare_split, the
  task's targets, the facts for the hints and auto mean/std); nothing is decoded twice or
  differently. The cluster is reached through stages/lib/data/raycluster.py's RayMap, an ordered,
  windowed map that knows nothing of prepare.
- Each task decodes a chunk of one shard (CHUNK rows); the driver takes the results in order
  and streams each into the shard being written (shards.ShardWriter, as a local worker
  does), with at most `window` tasks in flight or done and not yet written. So the driver
  holds one shard's buffer and the cluster's object store at most `window` chunks, whatever
  the dataset's size: its peak RSS is flat in N (bench/ray_prepare.py measures it).
- Inputs are read where the tasks run: data.source, made absolute, must be the same path on
  every node (a shared filesystem), or with prepare.ray_inputs: remote, its files are read
  from the DVC remote (stages/lib/data/dvcremote.py); a task that cannot find a file says so.
- Our code travels with the job (Ray's runtime_env py_modules: this checkout's stages/), so a
  cluster's nodes need Python and the requirements, not a copy of the project.
"""
from pathlib import Path

from stages.lib.io import StageError
from stages.lib.data.raycluster import RayMap
from stages.prepare_jobs import OUT_DIR, decode_rows, source_path

CHUNK = 256  # rows per task: ~0.1 s of decode at small sizes, 20 MiB at 160 px RGB
STAGES = Path(__file__).resolve().parent  # the `stages` package, shipped to the workers


class RayPool(RayMap):
    """prepare's jobs on a Ray cluster, with the interface of prepare's LocalPool (describe,
    imap, write_shards, shutdown). source: data.source as the tasks read it (for the error
    that says where the data must live)."""

    def __init__(self, address: str, num_cpus: int, source):
        self.address, self.source = address, source
        try:
            super().__init__(address, num_cpus, runtime_env={"py_modules": [str(STAGES)]})
        except ConnectionError as exc:
            raise StageError(f"prepare.ray_address: {exc}; fix prepare.ray_address in "
                             f"params.yaml (or -S prepare.ray_address=HOST:6379)") from None

    def describe(self) -> str:
        where = self.address or "a local cluster"
        return (f"Ray at {where}: {self.cpus} CPU{'s' if self.cpus > 1 else ''} on "
                f"{self.nodes} node{'s' if self.nodes > 1 else ''}")

    def get(self, ref):
        """A task's result; its error as the worker raised it, but a file missing there:
        where the data must live."""
        try:
            return super().get(ref)
        except FileNotFoundError as cause:
            if str(cause.filename).startswith("s3:"):
                raise StageError(f"{cause.filename}: {cause.strerror}: prepare.ray_inputs: "
                                 f"remote reads data.source's files as the last `dvc push` "
                                 f"left them; push them again (dvc push)") from None
            raise StageError(
                f"{cause.filename}: not found by a Ray worker. With prepare.engine: ray "
                f"the workers read data.source at {source_path(self.source)}, the path it "
                f"has here: put the data on a filesystem every node mounts at that path "
                f"(NFS, a shared volume) and set data.source to it, or push it and set "
                f"prepare.ray_inputs: remote.") from None

    def write_shards(self, splits, setup, shard_size: int, sample: tuple, norm: bool) -> tuple:
        """LocalPool.write_shards' files and facts, decoded in the cluster, written here shard
        by shard, in order, each streamed to the disk as its chunks come back. sample: one
        stored sample's shape (the modality's input_shape), the channel last."""
        import numpy as np
        from tqdm import tqdm

        from stages.lib.io import commit
        from stages.lib.data.raycluster import StorePages
        from stages.lib.data.shards import ShardWriter

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
        writer, pages = ShardWriter(OUT_DIR), StorePages()
        for name, k, _, n in shards:
            targets, widths, done = [], [], 0
            with writer.samples(name, k, (n, *sample)) as images:
                while done < n:
                    cx, cy, cw, (c_sides, c_colour, c_counts) = next(results)
                    images.x[done:done + len(cx)] = cx
                    pages.release(cx)
                    done += len(cx)
                    images.filled(done)
                    targets.append(cy)
                    widths.append(cw)
                    sides += c_sides
                    colour += c_colour
                    if c_counts is not None:
                        counts += c_counts
                    bar.update(len(cx))
                    del cx, cy, cw  # the object store may free the chunk now
            widths = np.concatenate(widths) if widths[0] is not None else None
            written = [*images.written,
                       *writer.targets(name, k, np.concatenate(targets), widths)]
            for tmp, out in written:
                commit(tmp, out)
        bar.close()
        return (sides, colour), (counts if norm else None)
