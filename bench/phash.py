"""phash as a near-duplicate detector: recall and false-positive rate per distance and image side.

A labelled synthetic benchmark, seeded (the same figures on every machine):
- originals, two families, each rendered at the image side measured:
  digits: scikit-learn's 8x8 digits, upscaled (bilinear); 10 classes of handwritten lookalikes;
  shapes: an ellipse, a rectangle or a triangle (the class) at a random place, size and grey
  level on a textured background, drawn at 4x and area-reduced to the side (detail at every side);
  products: centred silhouettes (a shoe, a shirt, a bag: the class) on a flat background, varying
  a little in size, place and grey level, like catalogue photos (the hardest lookalikes);
- true near-duplicates of each original: JPEG re-encodes (quality 75 and 40), resizes (x1.5 and
  x0.75), a small crop (5% off two sides, at least 1 px) and a brightness shift (+20 grey levels);
- distinct lookalikes: pairs of different originals of the same class.
Every file goes through ingest's own decode and hash (stages.lib.modality.imagecore.inspect).
recall = near-duplicate pairs within the distance / all; FPR = lookalike pairs within / all.

    python -m bench.phash                      # sides 8 12 16 24 32 48 64, 150 originals each
    python -m bench.phash --side 28 --n 300
"""
import io

import click
import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from stages.lib.modality.imagecore import inspect

DISTANCES = range(11)


def png(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def jpeg(img, quality: int) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def phash_of(data: bytes) -> int:
    return int(inspect(io.BytesIO(data))["phash"], 16)


def digits(n: int, side: int, rng):
    from sklearn.datasets import load_digits

    d = load_digits()
    pick = rng.choice(len(d.target), n, replace=False)
    for i in pick:
        small = Image.fromarray((d.images[i] * 255 / 16).astype(np.uint8), "L")
        yield int(d.target[i]), small.resize((side, side), Image.BILINEAR)


def shapes(n: int, side: int, rng):
    big = side * 4
    for _ in range(n):
        cls = int(rng.integers(3))
        background = rng.normal(100, 25, (big, big)).clip(0, 255).astype(np.uint8)
        img = Image.fromarray(background, "L").filter(ImageFilter.BoxBlur(2))
        draw = ImageDraw.Draw(img)
        w, h = rng.uniform(0.3, 0.7, 2) * big
        x, y = rng.uniform(0.05, 0.95 - w / big) * big, rng.uniform(0.05, 0.95 - h / big) * big
        fill = int(rng.integers(150, 256))
        box = [x, y, x + w, y + h]
        if cls == 0:
            draw.ellipse(box, fill=fill)
        elif cls == 1:
            draw.rectangle(box, fill=fill)
        else:
            draw.polygon([(x, y + h), (x + w, y + h), (x + w / 2, y)], fill=fill)
        yield cls, img.reduce(4)


def products(n: int, side: int, rng):
    """Centred silhouettes on a flat background, like catalogue photos: lookalikes that differ
    only a little in size, place, proportions and grey level (the hard case for phash)."""
    big = side * 4
    for _ in range(n):
        cls = int(rng.integers(3))
        img = Image.new("L", (big, big), 0)
        draw = ImageDraw.Draw(img)
        w, h = rng.uniform(0.55, 0.75, 2) * big
        cx, cy = (0.5 + rng.uniform(-0.05, 0.05, 2)) * big
        box = [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]
        fill = int(rng.integers(160, 256))
        if cls == 0:  # a "shoe": a sole and an upper
            draw.rectangle([box[0], cy + h / 4, box[2], box[3]], fill=fill)
            draw.ellipse([box[0], box[1], cx + w / 6, box[3]], fill=fill)
        elif cls == 1:  # a "shirt": a body and two sleeves
            draw.rectangle([cx - w / 4, box[1], cx + w / 4, box[3]], fill=fill)
            draw.polygon([(box[0], cy), (cx, box[1]), (box[2], cy)], fill=fill)
        else:  # a "bag": a body and a handle
            draw.rectangle([box[0], cy - h / 6, box[2], box[3]], fill=fill)
            draw.arc([cx - w / 4, box[1], cx + w / 4, cy + h / 6], 180, 360, fill=fill,
                     width=max(1, big // 16))
        yield cls, img.filter(ImageFilter.BoxBlur(1)).reduce(4)


def variants(img):
    """The true near-duplicates of one original, as encoded bytes."""
    side = img.width
    cut = max(1, round(0.05 * side))
    bright = Image.fromarray((np.asarray(img, dtype=np.int16) + 20).clip(0, 255).astype(np.uint8))
    return {
        "jpeg75": jpeg(img, 75),
        "jpeg40": jpeg(img, 40),
        "resize1.5": png(img.resize((round(side * 1.5),) * 2, Image.BILINEAR)),
        "resize0.75": png(img.resize((max(1, round(side * 0.75)),) * 2, Image.BILINEAR)),
        "crop5%": png(img.crop((cut, cut, side, side))),
        "bright+20": png(bright),
    }


def measure(side: int, n: int, seed: int = 0):
    """({transform: near-duplicate distances}, {family: lookalike distances})."""
    rng = np.random.default_rng(seed + side)
    near, look = {}, {}
    for family in (digits, shapes, products):
        originals = list(family(n, side, rng))
        hashes = [phash_of(png(img)) for _, img in originals]
        for (_, img), h in zip(originals, hashes, strict=True):
            for name, data in variants(img).items():
                near.setdefault(name, []).append(bin(h ^ phash_of(data)).count("1"))
        same = look.setdefault(family.__name__, [])
        for a in range(len(originals)):  # every pair of different originals of one class
            for b in range(a + 1, len(originals)):
                if originals[a][0] == originals[b][0]:
                    same.append(bin(hashes[a] ^ hashes[b]).count("1"))
    return ({k: np.array(v) for k, v in near.items()},
            {k: np.array(v) for k, v in look.items()})


def row(label: str, v) -> str:
    return f"{label:<22}" + " ".join(f"{(v <= d).mean():>6.3f}" for d in DISTANCES)


@click.command()
@click.option("--side", "sides", multiple=True, type=int, default=(8, 12, 16, 24, 32, 48, 64))
@click.option("--n", default=150, show_default=True, help="originals per family and side")
@click.option("--seed", default=0, show_default=True)
def main(sides, n, seed):
    click.echo(f"{'distance':<22}" + " ".join(f"{d:>6}" for d in DISTANCES))
    for side in sides:
        near, look = measure(side, n, seed)
        click.echo(f"side {side} ({sum(map(len, near.values()))} near-duplicate pairs, "
                   f"{sum(map(len, look.values()))} lookalike pairs)")
        click.echo(row("  recall", np.concatenate(list(near.values()))))
        click.echo(row("  recall without crops",
                       np.concatenate([v for k, v in near.items() if k != "crop5%"])))
        for name, v in near.items():
            click.echo(row(f"    {name}", v))
        click.echo(row("  FPR", np.concatenate(list(look.values()))))
        for name, v in look.items():
            click.echo(row(f"    {name}", v))


if __name__ == "__main__":
    main()
