"""The CPU cost of writing prepare's shards on a filesystem, and the prepare/decode ceiling it sets.

    python -m bench.write_cost                    # writes under ./data (the project's disk)
    python -m bench.write_cost --folder /dev/shm  # the same bytes to memory (tmpfs)

Writes --shards shards of 1,000 RGB images at --image-size px (1.9 GB at the defaults, the
bench/scale.py 25,000 case) with stages.lib.data.shards.save_npy, as prepare's workers do, then
deletes them. Prints the CPU seconds (user + system) of filling the arrays alone and of filling
and writing them, and the write cost per image. With --decode-ms (one image's decode in the
single-process loop of bench/scale.py, 1000 / its files/s), it prints the ceiling of prepare's
speed-up on 2 cores, 2 x decode / (decode + write), reached only if both cores do nothing else.
"""
import resource
import shutil
import tempfile
import time
from pathlib import Path

import click


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(folder: Path, shards: int, size: int, write: bool) -> float:
    """CPU seconds to fill (and write) the shards, as prepare's workers do each shard."""
    import numpy as np

    from stages.lib.data.shards import save_npy

    start = cpu()
    for k in range(shards):
        x = np.zeros((1000, size, size, 3), dtype=np.uint8)  # one fresh array per shard
        x[:] = k  # every page touched, as the decode does
        if write:
            save_npy(folder / f"images-{k:05d}.npy", x)
    return cpu() - start


@click.command()
@click.option("--folder", default="data", show_default=True, type=click.Path(),
              help="Where to write (a temp folder is made in it and removed).")
@click.option("--shards", default=25, show_default=True, help="Shards of 1,000 images.")
@click.option("--image-size", default=160, show_default=True)
@click.option("--decode-ms", default=0.0, show_default=True,
              help="One image's decode time (ms); 0: no ceiling printed.")
def main(folder, shards, image_size, decode_ms):
    """Print the CPU cost of writing shards to --folder."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=folder, prefix=".write-cost-"))
    try:
        tic = time.perf_counter()
        fill = run(work, shards, image_size, write=False)
        both = run(work, shards, image_size, write=True)
        wall = time.perf_counter() - tic
    finally:
        shutil.rmtree(work, ignore_errors=True)
    gb = shards * 1000 * image_size * image_size * 3 / 1e9
    per_image = (both - fill) / (shards * 1000) * 1000
    click.echo(f"{folder}: {gb:.2f} GB in {shards} shards; CPU fill only {fill:.2f} s, fill and "
               f"write {both:.2f} s: writing costs {(both - fill) / gb:.2f} CPU s per GB, "
               f"{per_image:.3f} ms per {image_size} px image ({wall:.1f} s wall)")
    if decode_ms:
        click.echo(f"prepare/decode ceiling on 2 cores: 2 x {decode_ms:.3f} / ({decode_ms:.3f} + "
                   f"{per_image:.3f}) = {2 * decode_ms / (decode_ms + per_image):.2f}")


if __name__ == "__main__":
    main()
