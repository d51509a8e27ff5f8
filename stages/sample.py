"""Write scikit-learn's digits (1,797 real 8x8 grey images, 10 classes) as an ImageFolder tree.

The images are binary PGM files written byte by byte here, not through an encoder, so their
bytes cannot depend on the zlib or Pillow build: every machine writes identical files.
"""
import shutil
from pathlib import Path

import click

from stages.lib.params import load, params_option

OUT = Path("data/sample")


def pgm_bytes(pixels) -> bytes:
    """A binary greyscale PGM (P5) of a 2-D uint8 array."""
    h, w = pixels.shape
    return f"P5\n{w} {h}\n255\n".encode() + pixels.tobytes()


def digit_images(per_class: int = 0):
    """Yield (relative path, PGM bytes) for the digits, in a fixed order."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    counts = {}
    for index, (image, target) in enumerate(zip(digits.images, digits.target, strict=True)):
        label = str(int(target))
        counts[label] = counts.get(label, 0) + 1
        if per_class and counts[label] > per_class:
            continue
        pixels = np.round(image * 255.0 / 16.0).astype(np.uint8)  # digits are 0..16
        yield f"{label}/{index:04d}.pgm", pgm_bytes(pixels)


@click.command()
@params_option
def main(params_path):
    """Write the built-in sample dataset to data/sample/<digit>/<index>.pgm.

    Reads `sample.per_class` (0 = all images) from the params file.
    """
    p = load("sample", params_path)
    tmp = OUT.with_name(OUT.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    n = 0
    for rel, data in digit_images(p.per_class):
        target = tmp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        n += 1
    shutil.rmtree(OUT, ignore_errors=True)
    tmp.rename(OUT)  # the folder appears whole or not at all
    click.echo(f"sample: wrote {n} images to {OUT}/")


if __name__ == "__main__":
    main()
