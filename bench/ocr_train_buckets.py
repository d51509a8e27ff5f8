"""OCR training with width buckets (prepare.width_buckets) against every line at prepare.width,
paired step by step on the same prepared data.

PROJECT: an ocr project whose `dvc repro prepare` ran with prepare.width_buckets set (its
data/processed/ holds the widths shards). Two CRNNs start from the same seeded weights; in each
epoch the bucketed one trains on stages.lib.train.augment.bucket_batches' batches (cut to their
width), the other on the stage's usual batches at full width, the two taking turns batch by
batch (so the machine's drifting speed hits both alike), with the sample's train params
(augmentation included). After each epoch both are scored on the val split (the bucketed one at
each line's bucket, as train and evaluate do). Prints lines/s of each, the ratio, and val CER.

    python -m bench.ocr_train_buckets PROJECT [--lines 512] [--epochs 2] [--threads 2]
"""
import dataclasses
import time
from pathlib import Path

import click


@click.command()
@click.argument("project", type=click.Path(exists=True, file_okay=False))
@click.option("--lines", default=512, show_default=True, help="First N train lines; 0 = all.")
@click.option("--epochs", default=2, show_default=True)
@click.option("--threads", default=0, show_default=True, help="torch threads; 0 = default.")
def main(project, lines, epochs, threads):
    import numpy as np
    import torch

    from stages.lib.train.augment import EpochBatches, bucket_batches, epoch_order
    from stages.lib.params import Train
    from stages.lib.data.shards import load_split, load_widths
    from stages.tasks.ocr import TASK
    from stages.lib.train.determinism import set_deterministic
    from stages.lib.train.loop import evaluate_loss, setup

    if threads:
        torch.set_num_threads(threads)
    root = Path(project) / "data/processed"
    x, y, meta = load_split("train", root, torch=True)
    xv, yv, _ = load_split("val", root, torch=True)
    widths, val_widths = load_widths("train", root), load_widths("val", root)
    if widths is None:
        raise click.ClickException(f"{root}: no widths shards; run prepare with "
                                   f"prepare.width_buckets set")
    n = min(lines, len(x)) if lines else len(x)
    widths = widths[:n]
    train = {k.split(".", 1)[1]: v for k, v in TASK.sample_params.items()
             if k.startswith("train.")}
    p = dataclasses.replace(Train(**train), epochs=epochs, warmup_epochs=0)
    set_deterministic(p.deterministic)
    runs = {"buckets": setup(p, meta, TASK), "full": setup(p, meta, TASK)}
    totals = {k: [0, 0.0] for k in runs}
    for epoch in range(epochs):
        plans = {"buckets": EpochBatches(x, y, None, p.batch_size, p, epoch, TASK,
                                         bucket_batches(n, widths, p.batch_size, p.seed, epoch)),
                 "full": EpochBatches(x, y, epoch_order(n, p.seed, epoch), p.batch_size, p,
                                      epoch, TASK)}
        for run in runs.values():
            run.model.train()
        for b in range(max(len(d) for d in plans.values())):
            for name, ds in plans.items():
                if b >= len(ds):
                    continue
                run = runs[name]
                tic = time.perf_counter()
                idx, xb, yb = ds[b]
                loss = TASK.loss(run.model(xb), yb, p)
                run.opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(run.model.parameters(), p.grad_clip)
                run.opt.step()
                totals[name][0] += len(idx)
                totals[name][1] += time.perf_counter() - tic
        scores = {name: evaluate_loss(run.model, xv, yv, TASK,
                                      widths=val_widths if name == "buckets" else None)[1]
                  for name, run in runs.items()}
        click.echo(f"epoch {epoch + 1}: val CER buckets {scores['buckets']:.4f}, "
                   f"full width {scores['full']:.4f}")
    rate = {k: v[0] / v[1] for k, v in totals.items()}
    share = {int(w): int((widths == w).sum()) for w in np.unique(widths)}
    click.echo(f"{n} train lines (per bucket {share}), batch {p.batch_size}, {epochs} epochs, "
               f"threads {torch.get_num_threads()}")
    click.echo(f"train: buckets {rate['buckets']:.1f} lines/s, full width {rate['full']:.1f} "
               f"lines/s, ratio {rate['buckets'] / rate['full']:.2f}")


if __name__ == "__main__":
    main()
