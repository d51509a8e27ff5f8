"""Decode every split file once into data/processed/ so training never decodes files.

Writes fixed-size shards per split (stages/lib/shards.py): <split>/images-NNNNN.npy (the stored
samples as the task's modality decodes them, up to prepare.shard_size; images: uint8 NxHxWxC)
and <split>/targets-NNNNN.npy (the task's targets; classification: int64 class indices), and
meta.json (the task's meta, e.g. class names, plus the input size, channels, the normalisation
every consumer applies, counts and shard size). What a file becomes is the modality's
(Task.modality: decode, header_facts, choose_shape); this stage only schedules and writes.

prepare.workers processes (0 = all cores) each decode and write whole shards; a shard's bytes
depend only on its rows, so the outs are the same whatever the worker count. Memory: one shard
per worker, whatever the dataset size. The workers are forked before the split tables are read
(they inherit none of it), and the parent holds the tables as their CSV text (stages/lib/rows.py,
about 90 bytes a row); each job carries its rows and what a worker needs to set itself up.
A worker writes its shard's files to temp files; the parent, otherwise idle, fsyncs and renames
them while the worker decodes its next shard (the workers never wait on the disk), and writes
meta.json only after every shard is in place.

prepare.engine: ray decodes on a Ray cluster instead (prepare.ray_address; stages/lib/rayprep.py):
its tasks run decode_rows, this process writes the same shards. workers, engine and ray_address
never change the outs, so no stage lists them in dvc.yaml (stages/lib/params.py PREPARE_PLACEMENT).
"""
import contextlib
import functools
import os
import shutil
import sys
from pathlib import Path

import click

from stages.lib.io import StageError, write_json
from stages.lib.params import load, params_option

SPLIT_DIR = Path("data/split")
OUT_DIR = Path("data/processed")
SPLITS = ("train", "val", "test")

_WORKER = {}  # per process: the task's encoder, its modality and the prepare params (first job)


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def input_size(p, image_size):
    """meta.json's image_size: a side (square images; image_size, resolved when auto), or
    [height, width] for text lines."""
    return [p.height, p.width] if p.height else image_size


def buckets(p) -> list[int]:
    """Every width bucket (prepare.width_buckets, then prepare.width); [] = off."""
    return [*p.width_buckets, p.width] if p.width_buckets else []


def init_worker(task_name, meta, source, image_size, channels, facts, norm, width_buckets=()):
    """Set this process up for write_shard or decode_rows (once per distinct setup: jobs carry
    it; nothing is read from the params file, which a Ray worker's machine may not have)."""
    from stages.tasks import get

    setup = (task_name, meta, source, image_size, channels, facts, norm, list(width_buckets))
    if _WORKER.get("setup") == setup:
        return
    _WORKER.clear()

    task = get(task_name)
    _WORKER.update(encode=task.encoder({**meta, "source": source_path(source)}),
                   modality=task.modality,
                   dtype=task.target_dtype,
                   source=source_tree(source), image_size=image_size, channels=channels,
                   facts=facts, norm=norm, width_buckets=list(width_buckets),
                   letterbox=bool(meta.get("letterbox")), sized=task.encoder_takes_size,
                   setup=setup)


@functools.lru_cache(maxsize=4)
def source_tree(source):
    """data.source as the decode opens files under it (`tree / path`): a folder, or with
    prepare.ray_inputs: remote, a ("s3", url, endpoint, dir md5, path) tuple: the files on the DVC
    remote (stages/lib/rayprep.py RemoteTree, fetched once per process)."""
    if isinstance(source, tuple):
        from stages.lib.rayprep import RemoteTree

        return RemoteTree(*source[1:4])
    return Path(source)


def source_path(source) -> str:
    """data.source's path as text (of a remote tuple: the path it has here)."""
    return source[4] if isinstance(source, tuple) else str(source)


def source_arg(source):
    """data.source as the jobs carry it: a path's text, or the remote tuple (source_tree)."""
    return source if isinstance(source, tuple) else str(source)


def resolve_letterbox(p, task) -> bool:
    """prepare.letterbox: auto is the task's default (detection: on; the others: off)."""
    from stages.lib.params import AUTO

    on = bool(task.letterbox) if p.letterbox == AUTO else p.letterbox
    if on and (task.letterbox is None or p.height):
        what = "text lines (prepare.height)" if p.height else f"task {task.name}"
        raise StageError(f"prepare.letterbox: true is not supported for {what}: its targets "
                         f"do not follow a letterbox; set prepare.letterbox to auto or false.")
    return on


def prepare_split(rows, source: Path, encode, dtype, image_size, channels, facts=None,
                  letterbox=False, sized=False, header_sizes=None, out=None, done=None, *,
                  modality):
    """(uint8 stored samples, targets) of some rows, each file decoded by the task's
    modality (its decode); encode(row, sample) gives a target (sized: encode(row, sample,
    size), the file's upright size before the resize, which a letterbox's geometry needs).
    letterbox: keep the aspect, pad. facts: a list that gets each file's (shorter side, grey)
    from the header this decode opens (prepare's hints, without a second pass over the
    files); header_sizes: a list that gets each file's header size (OCR's width buckets).
    out: a uint8 array of at least len(rows) samples to decode into (every byte of its first
    len(rows) is written) instead of a new one: a worker reuses one for all its shards, as
    fresh pages cost 8-10% of the decode. done: called with i after the first i files are
    decoded (and encoded), each time."""
    import numpy as np

    shape = (len(rows), *modality.input_shape(image_size, channels))
    x = np.zeros(shape, dtype=np.uint8) if out is None else out[:len(rows)]
    if x.shape != shape or x.dtype != np.uint8:
        raise ValueError(f"out: {out.dtype} {out.shape}, not room for uint8 {shape}")
    y = []
    for i, r in enumerate(rows):
        x[i], size = modality.decode(source / r["path"], image_size, channels, letterbox, facts,
                                     header_sizes)
        y.append(encode(r, x[i], size) if sized else encode(r, x[i]))
        if done is not None:
            done(i + 1)
    return x, np.array(y, dtype=dtype)


def write_shard(job) -> tuple:
    """Decode one shard's rows and write its files: (samples, the shorter sides of its
    images when it is a split whose sides count, how many are colour, the train pixels' value
    counts when mean/std are auto, [(temp file, file)]). Nothing but these small facts goes
    back to the parent, and the files' temp names: the parent fsyncs and renames them
    (io.commit) while this worker decodes its next shard, instead of this worker waiting on
    the disk."""
    import numpy as np

    from stages.lib.io import StreamedWrite
    from stages.lib.shards import IMAGES, TARGETS, WIDTHS, NpyBuffer, save_npy, shard_name

    setup, split, k, rows, sides_count = job
    init_worker(*setup)
    w = _WORKER
    facts = [] if w["facts"] else None
    sizes = [] if w["width_buckets"] else None
    path = OUT_DIR / split / shard_name(IMAGES, k)
    shape = (len(rows), *w["modality"].input_shape(w["image_size"], w["channels"]))
    if w.get("out") is None or not w["out"].fits(shape, np.uint8):  # the first shard is the longest
        w["out"] = NpyBuffer(shape, np.uint8)
    buf = w["out"]
    x = buf.array(shape, np.uint8)
    per_image = x.nbytes // len(x)
    # the images file goes to the disk as the decode fills it (io.StreamedWrite)
    with StreamedWrite(path, buf.memory, buf.file_size(shape, np.uint8)) as images_file:
        x, y = prepare_split(rows, w["source"], w["encode"], w["dtype"], w["image_size"],
                             w["channels"], facts, w["letterbox"], w["sized"], sizes, x,
                             done=lambda i: images_file.advance(buf.header_size + i * per_image),
                             modality=w["modality"])
        written = [(images_file.finish(), str(path))]
    files = [(TARGETS, y)]
    if w["width_buckets"]:  # from the headers the decode opened, not a second open
        files.append((WIDTHS, w["modality"].line_buckets(sizes, w["image_size"],
                                                         w["width_buckets"])))
    for kind, array in files:
        path = OUT_DIR / split / shard_name(kind, k)
        written.append((save_npy(path, array, pending=True), str(path)))
    return (len(rows), *decode_facts(split, x, facts, sides_count), written)


def decode_facts(split, x, facts, sides_count) -> tuple:
    """What a decode of some rows brings back for the hints and auto mean/std: (their shorter
    sides when sides_count, how many are colour, the train pixels' value counts when
    mean/std are auto, else None)."""
    counts = None
    if _WORKER["norm"] and split == "train":
        from stages.lib.autoprep import value_counts

        counts = value_counts(x)
    facts = facts or []
    return ([side for side, _ in facts] if sides_count else [],
            sum(not grey for _, grey in facts), counts)


def decode_rows(job) -> tuple:
    """engine ray's task (stages/lib/rayprep.py): decode some rows of one shard, in a Ray
    worker, and bring back (uint8 images, targets, bucket widths or None, decode_facts) for
    the driver to write into the shard. The same decode as write_shard's, nothing written."""
    setup, split, rows, sides_count = job
    init_worker(*setup)
    w = _WORKER
    facts = [] if w["facts"] else None
    sizes = [] if w["width_buckets"] else None
    x, y = prepare_split(rows, w["source"], w["encode"], w["dtype"], w["image_size"],
                         w["channels"], facts, w["letterbox"], w["sized"], sizes,
                         modality=w["modality"])
    widths = (w["modality"].line_buckets(sizes, w["image_size"], w["width_buckets"])
              if sizes is not None else None)
    return x, y, widths, decode_facts(split, x, facts, sides_count)


def header_job(job) -> tuple:
    """(shorter sides, colour count) of some rows' headers (image_size/channels auto), as the
    modality reads them (its header_facts)."""
    from stages.lib.modality import get

    source, rows, modality_name = job
    tree = source_tree(source)
    header_facts = get(modality_name).header_facts
    facts = [header_facts(tree / r["path"]) for r in rows]
    return [side for side, _ in facts], sum(not grey for _, grey in facts)


def pool(workers: int, modality_name: str):
    """A process pool of `workers` (fork where there is one: the parent's imports and task
    come along, nothing to re-import); None when one process does it all. Made before the
    split tables are read, so the workers inherit none of them (a forked worker's resident
    memory counts every page it shares with the parent): a fork-context executor forks every
    worker at its first submit, so one is made here.

    concurrent.futures, not multiprocessing.Pool: Pool.terminate() SIGTERMs workers that may
    hold its result queue's lock, and its task thread then waits on that lock forever (a
    full-disk case hung 7 runs in 200 under load: bench/prepare_full_disk.py). The executor
    never kills a healthy worker: on an error it cancels what has not started and waits for
    the few running jobs (see stopped)."""
    if workers == 1:
        return None
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn" if os.name != "posix" else "fork")
    executor = ProcessPoolExecutor(workers, mp_context=ctx, initializer=warm_up,
                                   initargs=(modality_name,))
    executor.submit(int)  # forks the workers now, before the tables
    return executor


@contextlib.contextmanager
def stopped(executor):
    """executor, shut down on leaving: on an error, what has not started is cancelled and the
    running jobs finish (so no worker writes a temp file after the parent's clean-up)."""
    if executor is None:
        yield None
        return
    try:
        yield executor
    except BaseException:
        executor.shutdown(wait=True, cancel_futures=True)
        raise
    executor.shutdown(wait=True)


def warm_up(modality_name: str):
    """A worker's imports, made as it starts (alongside the parent's reading of the tables):
    the modality's (numpy and Pillow for images) among them."""
    import numpy  # noqa: F401

    import stages.lib.autoprep  # noqa: F401
    import stages.lib.shards  # noqa: F401
    from stages.lib.modality import get

    get(modality_name)


def run_jobs(workers_pool, func, jobs, count: int, ordered: bool):
    """func over the jobs: in the pool (in order, or as they finish), or in this process when
    there is none or `count` <= 1; engine ray: every job in the cluster, in order."""
    if hasattr(workers_pool, "imap"):  # stages/lib/rayprep.py's RayEngine
        return workers_pool.imap(func, jobs)
    if workers_pool is None or count <= 1:
        return map(func, jobs)
    if ordered:
        return workers_pool.map(func, jobs)
    from concurrent.futures import as_completed

    return (f.result() for f in as_completed([workers_pool.submit(func, job) for job in jobs]))


def read_headers(splits, source, workers_pool, modality_name: str) -> tuple:
    """(train shorter sides, colour count) from every header, in the pool's processes."""
    chunk = 512
    parts = [rows for rows in splits.values() if len(rows)]
    train = [splits["train"]] if len(splits.get("train", ())) else parts
    n_train = sum((len(rows) + chunk - 1) // chunk for rows in train)
    n_every = sum((len(rows) + chunk - 1) // chunk for rows in parts)
    # both passes in one map: train's sides, then every file's colour
    jobs = ((source_arg(source), rows[i:i + chunk], modality_name) for group in (train, parts)
            for rows in group for i in range(0, len(rows), chunk))
    results = list(run_jobs(workers_pool, header_job, jobs, n_train + n_every, ordered=True))
    sides = [s for r in results[:n_train] for s in r[0]]
    return sides, sum(r[1] for r in results[n_train:])


def shard_setup(task_name, meta, source, p, image_size, channels, facts, norm) -> tuple:
    """What a worker sets itself up from (init_worker's arguments)."""
    return (task_name, meta, source_arg(source), input_size(p, image_size), channels, facts,
            norm, buckets(p))


def write_shards(splits, task_name, meta, source, p, workers_pool, image_size: int,
                 channels: int, facts: bool, norm: bool) -> tuple:
    """Every shard of every split, in the pool's processes (None: in this process). Returns
    the facts its decodes saw: (train shorter sides, colour count) when `facts`, and the train
    pixels' value counts when `norm` (None otherwise)."""
    import numpy as np
    from tqdm import tqdm

    from stages.lib.io import commit

    sides_from = "train" if len(splits.get("train", ())) else None  # else every split's
    size = p.shard_size
    shards = [(name, k, min(size, len(rows) - start)) for name, rows in splits.items()
              for k, start in enumerate(range(0, len(rows), size))]
    # the short last shards at the end, so no worker is left with a long one while the
    # others idle; the files do not depend on which process writes them or when
    order = sorted(shards, key=lambda shard: -shard[2])
    setup = shard_setup(task_name, meta, source, p, image_size, channels, facts, norm)
    # each job holds its shard's rows (slices of the tables: references, not copies)
    jobs = ((setup, name, k, splits[name][k * size:(k + 1) * size], sides_from in (None, name))
            for name, k, _ in order)
    total = sum(len(r) for r in splits.values())
    bar = tqdm(total=total, desc="prepare", unit="img", disable=None)
    sides, colour, counts = [], 0, np.zeros((channels, 256), dtype=np.int64)
    # each job writes its own files; a failure raises here and stops the other workers
    for n, job_sides, job_colour, job_counts, written in run_jobs(
            workers_pool, write_shard, jobs, len(order), ordered=False):
        for tmp, path in written:
            commit(tmp, path)
        bar.update(n)
        sides += job_sides
        colour += job_colour
        if job_counts is not None:
            counts += job_counts
    bar.close()
    return (sides, colour), (counts if norm else None)


@click.command()
@params_option
def main(params_path):
    """Decode, convert and resize the split images into shards under data/processed/.

    Reads `task`, `data.source` and
    `prepare.{image_size,channels,mean,std,shard_size,workers,letterbox,engine,ray_address}`
    from the params file (engine ray: decoded on a Ray cluster, docs/scale.md); `auto`
    image_size, channels, mean and std are chosen from the data
    (stages/lib/autoprep.py), one printed line per setting says what and why; letterbox auto
    is the task's default (detection: on).
    """
    from stages.lib.rows import read_rows
    from stages.tasks import current

    task = current(params_path)  # first: params that do not fit the task stop here
    source = Path(load("data", params_path).source)
    p = load("prepare", params_path)
    letterbox = resolve_letterbox(p, task)
    workers = p.workers or cpu_count()
    if p.engine == "ray":  # the tasks read data.source where they run: at its absolute path
        from stages.lib.rayprep import RayEngine, remote_spec

        source = remote_spec(source) if p.ray_inputs == "remote" else source.resolve()
        workers_pool = RayEngine(p.ray_address, workers, source, sys.modules[__name__])
        how = workers_pool.describe()
    else:
        # the pool first: its workers inherit this process as it is now, without the
        # tables, and import what they decode with while this one reads the tables
        workers_pool = pool(workers, task.modality_name)
        how = f"{workers} worker{'s' if workers > 1 else ''}"
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
    from stages.lib.autoprep import check_norm, needs_headers_first, resolve_norm
    from stages.lib.params import AUTO

    modality = task.modality
    meta = task.prepare_meta(splits)
    if letterbox or task.letterbox:  # recorded where it is on, and always for detection
        meta["letterbox"] = modality.LETTERBOX if letterbox else False
    task.encoder({**meta, "source": source_path(source)})  # fail here, not in a worker
    every = sum(len(r) for r in splits.values())
    first = needs_headers_first(p)
    if first:  # auto size/channels: from the headers, before any decode
        sides, colour = read_headers(splits, source, workers_pool, task.modality_name)
        image_size, channels, lines = modality.choose_shape(p, sides, colour, every)
        for text in lines:
            click.echo(text)
    else:
        image_size, channels = p.image_size, p.channels
    check_norm(p, channels)
    shutil.rmtree(OUT_DIR, ignore_errors=True)  # no shard of an earlier, larger run stays
    # the workers decode, write, and bring back the facts for the hints and auto mean/std:
    # the parent reads no file of the dataset (Amdahl: all that work on every core)
    norm = p.mean == AUTO
    if hasattr(workers_pool, "write_shards"):  # engine ray: decoded there, written here
        setup = shard_setup(task.name, meta, source, p, image_size, channels, not first, norm)
        sample = modality.input_shape(input_size(p, image_size), channels)
        (sides, colour), counts = workers_pool.write_shards(splits, setup, p.shard_size,
                                                            sample, norm)
    else:
        (sides, colour), counts = write_shards(splits, task.name, meta, source, p,
                                               workers_pool, image_size, channels,
                                               facts=not first, norm=norm)
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
    click.echo(f"prepare: {sum(len(r) for r in splits.values())} images -> {OUT_DIR}/ "
               f"({how})")


if __name__ == "__main__":
    main()
