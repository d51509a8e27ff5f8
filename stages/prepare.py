"""Decode and resize every split image once into data/processed/ so training never decodes files.

Writes <split>_x.npy (uint8 NxHxWxC), <split>_y.npy (the task's targets; classification: int64
class indices) and meta.json (the task's meta, e.g. class names, plus image size, channels and
the normalisation that every consumer applies).
"""
from pathlib import Path

import click

from stages.lib.io import read_csv, write_bytes, write_json
from stages.lib.params import load, params_option

SPLIT_DIR = Path("data/split")
OUT_DIR = Path("data/processed")
SPLITS = ("train", "val", "test")


def npy_bytes(array) -> bytes:
    import io

    import numpy as np

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def prepare_split(rows, source: Path, encode, dtype, image_size, channels):
    """(uint8 NxHxWxC images, targets) of one split; encode(row, pixels) gives a target."""
    import numpy as np
    from tqdm import tqdm

    from stages.lib.images import load_image

    x = np.zeros((len(rows), image_size, image_size, channels), dtype=np.uint8)
    y = []
    for i, r in enumerate(tqdm(rows, desc="prepare", unit="img", disable=None)):
        x[i] = load_image(source / r["path"], image_size, channels)
        y.append(encode(r, x[i]))
    return x, np.array(y, dtype=dtype)


@click.command()
@params_option
def main(params_path):
    """Decode, convert and resize the split images into data/processed/.

    Reads `task`, `data.source` and `prepare.{image_size,channels,mean,std}` from the params
    file.
    """
    from stages.tasks import current

    source = Path(load("data", params_path).source)
    p = load("prepare", params_path)
    task = current(params_path)
    splits = {name: read_csv(SPLIT_DIR / f"{name}.csv") for name in SPLITS}
    meta = task.prepare_meta(splits)
    encode = task.encoder(meta)
    for name, rows in splits.items():
        x, y = prepare_split(rows, source, encode, task.target_dtype, p.image_size, p.channels)
        write_bytes(OUT_DIR / f"{name}_x.npy", npy_bytes(x))
        write_bytes(OUT_DIR / f"{name}_y.npy", npy_bytes(y))
    write_json(OUT_DIR / "meta.json", {
        **meta, "image_size": p.image_size, "channels": p.channels,
        "mean": p.mean, "std": p.std, "counts": {n: len(r) for n, r in splits.items()},
    })
    click.echo(f"prepare: {sum(len(r) for r in splits.values())} images -> {OUT_DIR}/")


if __name__ == "__main__":
    main()
