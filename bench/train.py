"""Steady-state training throughput: the train stage's loop against a bare PyTorch loop.

Both train the same model (train.model) with the same batch size, optimizer and data already
in memory (random tensors of the default sample's shape: 1,257 grey 16x16 images, 10 classes),
on the same number of threads, in this one process. The stage's loop is stages.train.fit with
the default params (NaN/inf checks, accumulation bookkeeping, LR schedule; checkpoint writes
and validation happen outside the timed part of each epoch in both). Epochs alternate between
the two loops so background load hits both alike; the first epoch of each is warm-up and
dropped. Prints the median samples/s of each, their ratio and the median of the per-epoch
ratios (robust to load drifting during the run); target >= 0.95.

    python bench/train.py [--epochs 10] [--params params.yaml]
"""
import statistics
import sys
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def bare_epoch(model, opt, x, y, batch_size, order) -> float:
    """One epoch of the plainest loop; returns samples/s."""
    import torch.nn.functional as F

    model.train()
    tic = time.perf_counter()
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return len(order) / (time.perf_counter() - tic)


@click.command()
@click.option("--epochs", default=10, show_default=True, help="Timed epochs per loop (+1 warm-up).")
@click.option("--params", "params_path", default="params.yaml", show_default=True,
              help="Params file whose train section the stage loop uses.")
@click.option("--samples", default=1257, show_default=True, help="Train images in memory.")
def main(epochs, params_path, samples):
    """Print stage samples/s, bare samples/s and their ratio."""
    import dataclasses

    import torch

    from stages.lib.params import load
    from stages.train import epoch_order, fit, make_optimizer, set_deterministic, setup

    p = load("train", params_path)
    p = dataclasses.replace(p, epochs=epochs + 1, nproc=1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 1, 16, 16, generator=g)
    y = torch.randint(0, 10, (samples,), generator=g)
    xv, yv = x[:64], y[:64]
    meta = {"classes": [str(i) for i in range(10)], "channels": 1}
    set_deterministic(p.deterministic)

    stage_rates = []
    run = setup(p, meta)
    torch.manual_seed(p.seed)
    from stages.lib.models import build_model

    bare_model = build_model(p.model, 10, 1)
    bare_opt = make_optimizer(p, bare_model)
    bare_rates = []
    for epoch in range(epochs + 1):  # alternate which loop goes first, epoch by epoch
        def stage_epoch(epoch=epoch):
            fit(dataclasses.replace(p, epochs=epoch + 1), run, (x, y, xv, yv),
                on_epoch=lambda rec, perf: stage_rates.append(perf["samples_per_s"]))

        def bare(epoch=epoch):
            bare_rates.append(bare_epoch(bare_model, bare_opt, x, y, p.batch_size,
                                         epoch_order(samples, p.seed, epoch)))

        for loop in ((stage_epoch, bare) if epoch % 2 else (bare, stage_epoch)):
            loop()
    stage = statistics.median(stage_rates[1:])
    bare = statistics.median(bare_rates[1:])
    click.echo(f"threads {torch.get_num_threads()}, model {p.model}, batch {p.batch_size}, "
               f"{samples} samples, {epochs} timed epochs each (median)")
    click.echo(f"stage loop: {stage:9.1f} samples/s")
    click.echo(f"bare loop:  {bare:9.1f} samples/s")
    pairs = statistics.median(s / b for s, b in zip(stage_rates[1:], bare_rates[1:], strict=True))
    click.echo(f"ratio stage/bare: {stage / bare:.3f} (median of per-epoch pairs: {pairs:.3f}; "
               f"target >= 0.95)")


if __name__ == "__main__":
    main()
