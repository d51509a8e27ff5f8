"""Decode and resize every split image once into data/processed/ so training never decodes files.

Writes fixed-size shards per split (stages/lib/shards.py): <split>/images-NNNNN.npy (uint8
NxHxWxC, up to prepare.shard_size samples) and <split>/targets-NNNNN.npy (the task's targets;
classification: int64 class indices), and meta.json (the task's meta, e.g. class names, plus
image size, channels, the normalisation every consumer applies, counts and shard size).

prepare.workers processes (0 = all cores) each decode and write whole shards; a shard's bytes
depend only on its rows, so the outs are the same whatever the worker count. Memory: one shard
per worker, whatever the dataset size.
"""
import os
import shutil
from pathlib import Path

import click

from stages.lib.io import read_csv, write_json
from stages.lib.params import load, params_option

SPLIT_DIR = Path("data/split")
OUT_DIR = Path("data/processed")
SPLITS = ("train", "val", "test")

_WORKER = {}  # per process: the task's encoder and the prepare params


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def input_size(p, image_size):
    """meta.json's image_size: a side (square images; image_size, resolved when auto), or
    [height, width] for text lines."""
    return [p.height, p.width] if p.height else image_size


def buckets(p) -> list[int]:
    """Every width bucket (prepare.width_buckets, then prepare.width); [] = off."""
    return [*p.width_buckets, p.width] if p.width_buckets else []


def init_worker(params_path, meta, source, image_size, channels, width_buckets=()):
    from stages.tasks import current

    task = current(params_path)
    _WORKER.update(encode=task.encoder({**meta, "source": str(source)}), dtype=task.target_dtype,
                   source=Path(source), width_buckets=list(width_buckets),
                   image_size=image_size, channels=channels)


def line_buckets(rows, source: Path, image_size, width_buckets):
    """uint16 bucket width of each row's line: the smallest bucket holding the line as fit
    scales it (its header size; fit pads the rest of the record with the pad value, so the
    record cut at its bucket is exactly the line fitted to that width)."""
    import numpy as np
    from PIL import Image

    from stages.lib.images import bucket_of, line_width

    out = np.empty(len(rows), dtype=np.uint16)
    for i, r in enumerate(rows):
        with Image.open(source / r["path"]) as img:
            out[i] = bucket_of(line_width(img.size, image_size), width_buckets)
    return out


def prepare_split(rows, source: Path, encode, dtype, image_size, channels):
    """(uint8 NxHxWxC images, targets) of some rows; encode(row, pixels) gives a target."""
    import numpy as np

    from stages.lib.images import load_image

    from stages.lib.images import input_hw

    x = np.zeros((len(rows), *input_hw(image_size), channels), dtype=np.uint8)
    y = []
    for i, r in enumerate(rows):
        x[i] = load_image(source / r["path"], image_size, channels)
        y.append(encode(r, x[i]))
    return x, np.array(y, dtype=dtype)


def write_shard(job) -> int:
    """Decode one shard's rows and write its two files; the number of samples."""
    from stages.lib.shards import IMAGES, TARGETS, WIDTHS, save_npy, shard_name

    split, k, rows = job
    w = _WORKER
    x, y = prepare_split(rows, w["source"], w["encode"], w["dtype"], w["image_size"],
                         w["channels"])
    save_npy(OUT_DIR / split / shard_name(IMAGES, k), x)
    save_npy(OUT_DIR / split / shard_name(TARGETS, k), y)
    if w["width_buckets"]:
        save_npy(OUT_DIR / split / shard_name(WIDTHS, k),
                 line_buckets(rows, w["source"], w["image_size"], w["width_buckets"]))
    return len(rows)


def write_shards(splits, params_path, meta, source, p, workers: int, image_size: int,
                 channels: int) -> None:
    """Every shard of every split, in `workers` processes (1 = in this process)."""
    from tqdm import tqdm

    jobs = [(name, k, rows[start:start + p.shard_size])
            for name, rows in splits.items()
            for k, start in enumerate(range(0, len(rows), p.shard_size))]
    init = (params_path, meta, str(source), input_size(p, image_size), channels, buckets(p))
    total = sum(len(r) for r in splits.values())
    bar = tqdm(total=total, desc="prepare", unit="img", disable=None)
    if workers == 1 or len(jobs) <= 1:
        init_worker(*init)
        for job in jobs:
            bar.update(write_shard(job))
    else:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn" if os.name != "posix" else "fork")
        with ctx.Pool(min(workers, len(jobs)), init_worker, init) as pool:
            for n in pool.imap_unordered(write_shard, jobs):  # each job writes its own files
                bar.update(n)
    bar.close()


def train_images():
    """The prepared train images, one shard at a time (uint8 NxHxWxC)."""
    import numpy as np

    from stages.lib.shards import IMAGES

    for path in sorted((OUT_DIR / "train").glob(f"{IMAGES}-*.npy")):
        yield np.load(path, allow_pickle=False)


@click.command()
@params_option
def main(params_path):
    """Decode, convert and resize the split images into shards under data/processed/.

    Reads `task`, `data.source` and `prepare.{image_size,channels,mean,std,shard_size,workers}`
    from the params file; `auto` image_size, channels, mean and std are chosen from the data
    (stages/lib/autoprep.py), one printed line per setting says what and why.
    """
    from stages.lib.autoprep import check_norm, resolve_norm, resolve_shape
    from stages.tasks import current

    source = Path(load("data", params_path).source)
    p = load("prepare", params_path)
    task = current(params_path)
    splits = {name: read_csv(SPLIT_DIR / f"{name}.csv") for name in SPLITS}
    meta = task.prepare_meta(splits)
    task.encoder({**meta, "source": str(source)})  # fail here, not in a worker
    image_size, channels, lines = resolve_shape(p, splits, source)
    for text in lines:
        click.echo(text)
    check_norm(p, channels)
    shutil.rmtree(OUT_DIR, ignore_errors=True)  # no shard of an earlier, larger run stays
    workers = p.workers or cpu_count()
    write_shards(splits, params_path, meta, source, p, workers, image_size, channels)
    mean, std, line = resolve_norm(p, channels, train_images)
    click.echo(line)
    write_json(OUT_DIR / "meta.json", {
        **meta, "image_size": input_size(p, image_size), "channels": channels,
        "mean": mean, "std": std, "counts": {n: len(r) for n, r in splits.items()},
        "shard_size": p.shard_size,
        **({"width_buckets": buckets(p)} if p.width_buckets else {}),
    })
    click.echo(f"prepare: {sum(len(r) for r in splits.values())} images -> {OUT_DIR}/ "
               f"({workers} worker{'s' if workers > 1 else ''})")


if __name__ == "__main__":
    main()
