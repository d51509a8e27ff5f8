"""Segmentation benchmarks: the train stage's loop against a bare loop, and onnxruntime against
PyTorch for prediction.

    python -m bench.segment [--epochs 3] [--samples 256] [--project DIR] [--images 256]

Training: the stage's loop (stages.lib.train.loop.fit with the segmentation task and the built-in
sample's params: U-Net, batch 16, 128 px RGB, per-sample augmentation of image and mask, the
NaN/inf checks) and the plainest loop (forward, cross-entropy with ignore_index, backward, step)
take turns step by step on the same samples, as bench/train.py does for classification, so this
machine's drifting speed hits both alike. The first epoch is warm-up. Prints samples/s of each
and the ratio stage/bare (target >= 0.95).

Prediction (with --project, a project whose `dvc repro` ran with `task: segmentation`): the
same uint8 batches of its sample images through models/model.onnx (onnxruntime) and
models/model.pt (PyTorch eager), preprocessing and mask decoding (argmax, areas, RLE, PNG)
included, file decoding not. Prints images/s of both and the ratio.
"""
import time
from pathlib import Path

import click


def train_ratio(epochs: int, samples: int) -> None:
    import torch
    import torch.nn.functional as F

    from bench.paired import bare_steps, paired_fit, rates
    from stages.lib.params import Train
    from stages.tasks import get
    from stages.tasks.segmentation.model import build_model
    from stages.lib.train.determinism import set_deterministic
    from stages.lib.train.loop import make_optimizer, setup

    task = get("segmentation")
    sp = task.sample_params
    p = Train(model=sp["train.model"], batch_size=sp["train.batch_size"], lr=sp["train.lr"],
              aug_hflip=sp["train.aug_hflip"], epochs=epochs + 1)
    size = sp["prepare.image_size"]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 3, size, size, generator=g)
    y = torch.randint(0, 4, (samples, size, size), generator=g, dtype=torch.uint8)
    meta = {"classes": ["background", "disc", "box", "blob"], "channels": 3}
    set_deterministic(p.deterministic)
    run = setup(p, meta, task)
    torch.manual_seed(p.seed)
    bare_model = build_model(p.model, 4, 3)
    bare_opt = make_optimizer(p, bare_model)
    bare_step = bare_steps(bare_opt, lambda idx: F.cross_entropy(
        bare_model(x[idx]), y[idx].long(), ignore_index=255))

    bare_model.train()
    steps = paired_fit(p, run, (x, y, x[:16], y[:16]), bare_step)
    timed = [s for epoch in steps[1:] for s in epoch]
    stage, bare = rates(steps[1:])
    click.echo(f"train: threads {torch.get_num_threads()}, {p.model}, batch {p.batch_size}, "
               f"{size} px, {samples} samples, {epochs} timed epochs ({len(timed)} step pairs)")
    click.echo(f"  stage loop: {stage:8.2f} samples/s (with per-sample image+mask augmentation)")
    click.echo(f"  bare loop:  {bare:8.2f} samples/s")
    click.echo(f"  ratio stage/bare: {stage / bare:.3f} (target >= 0.95)")


def predict_ratio(project: Path, images: int, batch_size: int) -> None:
    import numpy as np

    from stages.lib.modality.imageserve import read as read_image
    from tools.inference import load, predict_batch

    onnx_model = load("onnxruntime", project / "models/model.onnx")
    torch_model = load("torch", project / "models/model.pt")
    files = sorted((project / "data/sample/images").glob("*.png"))[:images]
    pixels = [read_image(f, onnx_model.image_size, onnx_model.channels) for f in files]
    batches = [pixels[i:i + batch_size] for i in range(0, len(pixels), batch_size)]
    rates = {}
    for name, model in (("onnxruntime", onnx_model), ("torch", torch_model)):
        predict_batch(model, batches[0], 1)  # warm-up
        tic = time.perf_counter()
        for batch in batches:
            predict_batch(model, batch, 1)
        rates[name] = len(pixels) / (time.perf_counter() - tic)
    same = np.mean([a["rle"] == b["rle"] for a, b in zip(
        predict_batch(onnx_model, batches[0], 1), predict_batch(torch_model, batches[0], 1),
        strict=True)])
    click.echo(f"predict: {len(pixels)} images at {onnx_model.image_size} px, batch {batch_size}")
    click.echo(f"  onnxruntime: {rates['onnxruntime']:8.1f} images/s")
    click.echo(f"  torch:       {rates['torch']:8.1f} images/s")
    click.echo(f"  ratio onnxruntime/torch: {rates['onnxruntime'] / rates['torch']:.2f}; "
               f"identical masks on the first batch: {same:.0%}")


@click.command()
@click.option("--epochs", default=3, show_default=True, help="Timed epochs (+1 warm-up).")
@click.option("--samples", default=256, show_default=True, help="Train samples in memory.")
@click.option("--project", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="A project with a segmentation run: also benchmark prediction.")
@click.option("--images", default=256, show_default=True, help="Images to predict.")
@click.option("--batch-size", default=16, show_default=True, help="Prediction batch size.")
def main(epochs, samples, project, images, batch_size):
    """Print the train-loop and prediction ratios."""
    train_ratio(epochs, samples)
    if project:
        predict_ratio(project, images, batch_size)


if __name__ == "__main__":
    main()
