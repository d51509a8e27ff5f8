"""The picture of docs/ocr.md: one text line (DejaVu Sans from matplotlib's fonts, rendered by
the synth_ocr renderer) under each stroke augmentation of stages/tasks/ocr/strokeaug.py and
each paper one of stages/tasks/ocr/paperaug.py, three
seeds side by side; the top row is the line itself. Writes docs/ocr_augmentations.png.

    python -m bench.ocr_aug_grid [--out docs/ocr_augmentations.png]
"""
import dataclasses
from pathlib import Path

import click

KNOBS = (("aug_stroke", 1.0), ("aug_shear", 0.35), ("aug_aspect", 0.35), ("aug_elastic", 2.5),
         ("aug_texture", 0.12), ("aug_downscale", 0.6), ("aug_jpeg", 1.0),
         ("aug_gradient", 0.8), ("aug_specks", 0.03))
SEEDS = (1, 2, 3)


@click.command()
@click.option("--out", default="docs/ocr_augmentations.png", show_default=True,
              type=click.Path(path_type=Path))
def main(out):
    import matplotlib
    import numpy as np
    import torch
    from PIL import Image, ImageDraw, ImageFont

    from stages.lib.params import Train
    from stages.tasks.ocr.augment import augment
    from stages.tasks.ocr.synth import Style, render

    ttf = Path(matplotlib.__file__).parent / "mpl-data" / "fonts" / "ttf"
    style = Style(shear_p=0.0, blur=(0.0, 0.0), noise=(0.0, 0.0), paper=(235, 235), contrast=235,
                  jitter=0.0, tracking=(0.02, 0.02), size=(36, 36))
    line, _ = render(ttf / "DejaVuSans.ttf", "Invoice 39.95", np.random.default_rng(0), style)
    x = torch.from_numpy(line.astype(np.float32))[None] / 255
    label_w, gap, (h, w) = 150, 6, line.shape
    rows = [("(the line)", [line] * len(SEEDS))]
    for knob, value in KNOBS:
        p = dataclasses.replace(Train(), **{knob: value})
        rows.append((f"{knob} {value:g}", [
            (augment(x.clone(), p, s)[0].clamp(0, 1) * 255).round().to(torch.uint8).numpy()
            for s in SEEDS]))
    sheet = Image.new("L", (label_w + len(SEEDS) * (w + gap), len(rows) * (h + gap)), 255)
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.truetype(str(ttf / "DejaVuSans.ttf"), 13)
    for r, (label, images) in enumerate(rows):
        y = r * (h + gap)
        draw.text((4, y + h // 2 - 8), label, font=font, fill=0)
        for c, img in enumerate(images):
            sheet.paste(Image.fromarray(img), (label_w + c * (w + gap), y))
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out, optimize=True)
    click.echo(f"wrote {out} ({sheet.size[0]} x {sheet.size[1]})")


if __name__ == "__main__":
    main()
