"""Decode and resize every split image once into data/processed/ so training never decodes files.

Writes <split>_x.npy (uint8 NxHxWxC), <split>_y.npy (int64 class indices) and meta.json
(class names, image size, channels and the normalisation that every consumer applies).
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


def prepare_split(rows, source: Path, classes, image_size, channels):
    import numpy as np
    from tqdm import tqdm

    from stages.lib.images import load_image

    index = {c: i for i, c in enumerate(classes)}
    x = np.zeros((len(rows), image_size, image_size, channels), dtype=np.uint8)
    for i, r in enumerate(tqdm(rows, desc="prepare", unit="img", disable=None)):
        x[i] = load_image(source / r["path"], image_size, channels)
    y = np.array([index[r["label"]] for r in rows], dtype=np.int64)
    return x, y


@click.command()
@params_option
def main(params_path):
    """Decode, convert and resize the split images into data/processed/.

    Reads `data.source` and `prepare.{image_size,channels,mean,std}` from the params file.
    """
    from stages.lib.io import StageError

    source = Path(load("data", params_path).source)
    p = load("prepare", params_path)
    if p.channels not in (1, 3) or len(p.mean) != p.channels or len(p.std) != p.channels:
        raise StageError("prepare.channels must be 1 or 3, with one mean and one std per channel.")
    splits = {name: read_csv(SPLIT_DIR / f"{name}.csv") for name in SPLITS}
    classes = sorted({r["label"] for rows in splits.values() for r in rows})
    for name, rows in splits.items():
        x, y = prepare_split(rows, source, classes, p.image_size, p.channels)
        write_bytes(OUT_DIR / f"{name}_x.npy", npy_bytes(x))
        write_bytes(OUT_DIR / f"{name}_y.npy", npy_bytes(y))
    write_json(OUT_DIR / "meta.json", {
        "classes": classes, "image_size": p.image_size, "channels": p.channels,
        "mean": p.mean, "std": p.std, "counts": {n: len(r) for n, r in splits.items()},
    })
    click.echo(f"prepare: {sum(len(r) for r in splits.values())} images -> {OUT_DIR}/")


if __name__ == "__main__":
    main()
