"""Decode every split file once into data/processed/ so training never decodes files.

Writes fixed-size shards per split (stages/lib/data/shards.py): <split>/images-NNNNN.npy (the stored
samples as the task's modality decodes them, up to prepare.shard_size; images: uint8 NxHxWxC)
and <split>/targets-NNNNN.npy (the task's targets; classification: int64 class indices), and
meta.json (the task's meta, e.g. class names, plus the input size, channels, the normalisation
every consumer applies, counts and shard size). What a file becomes is the modality's
(Task.modality: decode, header_facts, choose_shape); this stage only schedules and writes.

prepare.workers processes (0 = all cores) each decode and write whole shards; a shard's bytes
depend only on its rows, so the outs are the same whatever the worker count. Memory: one shard
per worker, whatever the dataset size. The workers are forked before the split tables are read
(they inherit none of it), and the parent holds the tables as their CSV text
(stages/lib/data/rows.py,
about 90 bytes a row); each job carries its rows and what a worker needs to set itself up.
A worker writes its shard's files to temp files; the parent, otherwise idle, fsyncs and renames
them while the worker decodes its next shard (the workers never wait on the disk), and writes
meta.json only after every shard is in place.

The jobs the workers run are in stages/prepare_jobs.py (a module never run as __main__).
prepare.engine: ray decodes on a Ray cluster instead (prepare.ray_address; stages/prepare_ray.py):
its tasks run decode_rows, this process writes the same shards. workers, engine and ray_address
never change the outs, so no stage lists them in dvc.yaml (stages/lib/params.py PREPARE_PLACEMENT).
"""
import contextlib
import itertools
import os
import shutil
from pathlib import Path

import click

from stages.lib.io import StageError, write_json
from stages.lib.params import params_option
from stages.prepare_jobs import OUT_DIR, header_job, source_arg, source_path, warm_up, write_shard

SPLIT_DIR = Path("data/split")
SPLITS = ("train", "val", "test")


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def input_size(p, image_size):
    """meta.json's image_size: a side (square images; image_size, resolved when auto), or
    [height, width] for text lines."""
    return [p.height, p.width] if p.height else image_size


def buckets(p) -> list[int]:
    """Every width bucket (prepare.width_buckets, then prepare.width); [] = off."""
    return [*p.width_buckets, p.width] if p.width_buckets else []


def resolve_letterbox(p, task) -> bool:
    """prepare.letterbox: auto is the task's default (detection: on; the others: off)."""
    from stages.lib.params import AUTO

    on = bool(task.letterbox) if p.letterbox == AUTO else p.letterbox
    if on and (task.letterbox is None or p.height):
        what = "text lines (prepare.height)" if p.height else f"task {task.name}"
        raise StageError(f"prepare.letterbox: true is not supported for {what}: its targets "
                         f"do not follow a letterbox; set prepare.letterbox to auto or false.")
    return on


class LocalPool:
    """prepare.engine: local: `workers` processes (fork where there is one: the parent's
    imports and task come along, nothing to re-import), or this process alone when workers is
    1. Made before the split tables are read, so the workers inherit none of them (a forked
    worker's resident memory counts every page it shares with the parent): a fork-context
    executor forks every worker at its first submit, so one is made here. The same interface
    as engine ray's RayPool (stages/prepare_ray.py): describe, imap, write_shards, shutdown.

    concurrent.futures, not multiprocessing.Pool: Pool.terminate() SIGTERMs workers that may
    hold its result queue's lock, and its task thread then waits on that lock forever (a
    full-disk case hung 7 runs in 200 under load: bench/prepare_full_disk.py). The executor
    never kills a healthy worker: on an error it cancels what has not started and waits for
    the few running jobs (see stopped)."""

    def __init__(self, workers: int, modality_name: str):
        self.workers, self.executor = workers, None
        if workers == 1:
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("spawn" if os.name != "posix" else "fork")
        self.executor = ProcessPoolExecutor(workers, mp_context=ctx, initializer=warm_up,
                                            initargs=(modality_name,))
        self.executor.submit(int)  # forks the workers now, before the tables

    def describe(self) -> str:
        return f"{self.workers} worker{'s' if self.workers > 1 else ''}"

    def imap(self, func, jobs, ordered: bool = True):
        """func over the jobs: in the workers (in order, or as they finish), or in this
        process when there are none or one job alone."""
        jobs = iter(jobs)
        first = list(itertools.islice(jobs, 2))
        jobs = itertools.chain(first, jobs)
        if self.executor is None or len(first) <= 1:
            return map(func, jobs)
        if ordered:
            return self.executor.map(func, jobs)
        from concurrent.futures import as_completed

        return (f.result() for f in as_completed([self.executor.submit(func, job)
                                                  for job in jobs]))

    def write_shards(self, splits, setup, size: int, sample: tuple, norm: bool) -> tuple:
        """Every shard of every split, each decoded and written by a worker (setup: what a
        worker sets itself up from, shard_setup), the parent committing the files. sample: one
        stored sample's shape (the modality's input_shape), the channel last. Returns the
        facts its decodes saw: (train shorter sides, colour count), and the train pixels'
        value counts when `norm` (None otherwise)."""
        import numpy as np
        from tqdm import tqdm

        from stages.lib.io import commit

        sides_from = "train" if len(splits.get("train", ())) else None  # else every split's
        shards = [(name, k, min(size, len(rows) - start)) for name, rows in splits.items()
                  for k, start in enumerate(range(0, len(rows), size))]
        # the short last shards at the end, so no worker is left with a long one while the
        # others idle; the files do not depend on which process writes them or when
        order = sorted(shards, key=lambda shard: -shard[2])
        # each job holds its shard's rows (slices of the tables: references, not copies)
        jobs = ((setup, name, k, splits[name][k * size:(k + 1) * size],
                 sides_from in (None, name)) for name, k, _ in order)
        total = sum(len(r) for r in splits.values())
        channels = sample[-1]
        bar = tqdm(total=total, desc="prepare", unit="img", disable=None)
        sides, colour, counts = [], 0, np.zeros((channels, 256), dtype=np.int64)
        # each job writes its own files; a failure raises here and stops the other workers
        for n, job_sides, job_colour, job_counts, written in self.imap(write_shard, jobs,
                                                                        ordered=False):
            for tmp, path in written:
                commit(tmp, path)
            bar.update(n)
            sides += job_sides
            colour += job_colour
            if job_counts is not None:
                counts += job_counts
        bar.close()
        return (sides, colour), (counts if norm else None)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=wait, cancel_futures=cancel_futures)


@contextlib.contextmanager
def stopped(workers_pool):
    """workers_pool (LocalPool or RayPool), shut down on leaving: on an error, what has not
    started is cancelled and the running jobs finish (so no worker writes a temp file after
    the parent's clean-up)."""
    try:
        yield workers_pool
    except BaseException:
        workers_pool.shutdown(wait=True, cancel_futures=True)
        raise
    workers_pool.shutdown(wait=True)


def read_headers(splits, source, workers_pool, modality_name: str) -> tuple:
    """(train shorter sides, colour count) from every header, in the pool's processes."""
    chunk = 512
    parts = [rows for rows in splits.values() if len(rows)]
    train = [splits["train"]] if len(splits.get("train", ())) else parts
    n_train = sum((len(rows) + chunk - 1) // chunk for rows in train)
    # both passes in one map: train's sides, then every file's colour
    jobs = ((source_arg(source), rows[i:i + chunk], modality_name) for group in (train, parts)
            for rows in group for i in range(0, len(rows), chunk))
    results = list(workers_pool.imap(header_job, jobs))
    sides = [s for r in results[:n_train] for s in r[0]]
    return sides, sum(r[1] for r in results[n_train:])


def shard_setup(task_name, meta, source, p, image_size, channels, facts, norm) -> tuple:
    """What a worker sets itself up from (prepare_jobs.init_worker's arguments)."""
    return (task_name, meta, source_arg(source), input_size(p, image_size), channels, facts,
            norm, buckets(p))


@click.command()
@params_option
def main(params_path):
    """Decode, convert and resize the split images into shards under data/processed/.

    Reads `task`, `data.source` and
    `prepare.{image_size,channels,mean,std,shard_size,workers,letterbox,engine,ray_address}`
    from the params file (engine ray: decoded on a Ray cluster, docs/scale.md); `auto`
    image_size, channels, mean and std are chosen from the data
    (stages/lib/data/autoprep.py), one printed line per setting says what and why; letterbox auto
    is the task's default (detection: on).
    """
    from stages.lib.data.rows import read_rows
    from stages.tasks import open_stage

    task, params, _ = open_stage("prepare", params_path)  # first: params that do not fit stop
    source = Path(params["data"].source)
    p = params["prepare"]
    letterbox = resolve_letterbox(p, task)
    workers = p.workers or cpu_count()
    if p.engine == "ray":  # the tasks read data.source where they run: at its absolute path
        from stages.lib.data.dvcremote import remote_spec
        from stages.prepare_ray import RayPool

        source = remote_spec(source) if p.ray_inputs == "remote" else source.resolve()
        workers_pool = RayPool(p.ray_address, workers, source)
    else:
        # the pool first: its workers inherit this process as it is now, without the
        # tables, and import what they decode with while this one reads the tables
        workers_pool = LocalPool(workers, task.modality_name)
    how = workers_pool.describe()
    try:
        with stopped(workers_pool):
            splits = {name: read_rows(SPLIT_DIR / f"{name}.csv") for name in SPLITS}
            prepare_splits(task, source, p, splits, letterbox, how, workers_pool)
    except BaseException:  # the workers are gone: no temp file of a shard stays behind
        for tmp in OUT_DIR.rglob(".*.tmp"):
            tmp.unlink(missing_ok=True)
        raise


def prepare_splits(task, source, p, splits, letterbox, how, workers_pool):
    """Everything after the pool (or the Ray engine) is up: meta, the auto hints, the shards,
    meta.json. how: where the decoding ran, for the last line."""
    from stages.lib.data.autoprep import AUTO, check_norm, needs_headers_first, resolve_norm

    modality = task.modality
    meta = task.prepare_meta(splits)
    if letterbox or task.letterbox:  # recorded where it is on, and always for detection
        meta["letterbox"] = modality.LETTERBOX if letterbox else False
    task.encoder({**meta, "source": source_path(source)})  # fail here, not in a worker
    every = sum(len(r) for r in splits.values())
    given = modality.given_size(p)  # the size params.yaml gives (images: auto or pixels)
    first = needs_headers_first(p, given)
    if first:  # auto size/channels: from the headers, before any decode
        sides, colour = read_headers(splits, source, workers_pool, task.modality_name)
        image_size, channels, lines = modality.choose_shape(p, sides, colour, every)
        for text in lines:
            click.echo(text)
    else:
        image_size, channels = given, p.channels
    check_norm(p, channels)
    shutil.rmtree(OUT_DIR, ignore_errors=True)  # no shard of an earlier, larger run stays
    # the workers decode, write, and bring back the facts for the hints and auto mean/std:
    # the parent reads no file of the dataset (Amdahl: all that work on every core)
    norm = p.mean == AUTO
    setup = shard_setup(task.name, meta, source, p, image_size, channels, not first, norm)
    sample = modality.input_shape(modality.stored(input_size(p, image_size), channels))
    (sides, colour), counts = workers_pool.write_shards(splits, setup, p.shard_size, sample, norm)
    if not first:
        for text in modality.choose_shape(p, sides, colour, every)[2]:
            click.echo(text)
    mean, std, line = resolve_norm(p, channels, counts=counts)
    click.echo(line)
    write_json(OUT_DIR / "meta.json", {
        **meta, "image_size": input_size(p, image_size), "channels": channels,
        "mean": mean, "std": std, "counts": {n: len(r) for n, r in splits.items()},
        "shard_size": p.shard_size,
        **({"width_buckets": buckets(p)} if p.width_buckets else {}),
    })
    click.echo(f"prepare: {sum(len(r) for r in splits.values())} {modality.WORDS['items']} -> "
               f"{OUT_DIR}/ ({how})")


if __name__ == "__main__":
    main()
