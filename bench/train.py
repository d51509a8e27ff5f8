"""Steady-state training throughput: the train stage's loop against a bare PyTorch loop.

Both train the same model (train.model) with the same batch size, optimizer and data already
in memory (random tensors of the default sample's shape: 1,257 grey 16x16 images, 10 classes),
on the same number of threads, in this one process. The stage's loop is stages.lib.train.loop.fit
with the default params (NaN/inf checks on loss and gradients, accumulation bookkeeping, LR
schedule, progress bar); validation and checkpoint writes happen between epochs and are not
timed.

The two loops take turns step by step: the bench wraps the stage's batch iterator, and each
time the stage asks for its next batch, the bare loop first runs one step on the same samples.
So every stage step is timed next to a bare one, and this machine's drifting speed (±15% over
seconds on shared vCPUs) hits both alike. Per step, the stage's time runs from asking for a
batch to asking for the next one (fetch, forward, backward, checks, optimizer step); the bare
step's covers indexing the batch, forward, backward and optimizer step. The first epoch is
warm-up and dropped. Prints each loop's samples/s over the timed steps, their ratio, and the
median of per-epoch ratios; target >= 0.95.

    python -m bench.train [--epochs 10] [--params params.yaml] [--shards]
    python -m bench.train --processed data/processed [--params params.yaml] [--epochs 2]

--shards: the stage's loop reads prepare's shards from disk (per-batch reads and
normalisation, as the train stage does) while the bare loop indexes the same images held in
memory, normalised once: the cost of streaming. --processed: the same, on the train and val
shards a prepare already wrote (bench/scale.py: its 25,000 and 100,000 image trees).
"""
import statistics
import time

import click


def bare_step(model, opt, x, y, idx) -> float:
    """One step of the plainest loop on samples idx; returns its seconds."""
    import torch.nn.functional as F

    tic = time.perf_counter()
    loss = F.cross_entropy(model(x[idx]), y[idx])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return time.perf_counter() - tic


@click.command()
@click.option("--epochs", default=10, show_default=True, help="Timed epochs (+1 warm-up).")
@click.option("--params", "params_path", default="params.yaml", show_default=True,
              help="Params file whose train section the stage loop uses.")
@click.option("--samples", default=1257, show_default=True, help="Train images in memory.")
@click.option("--shards", is_flag=True,
              help="The stage reads the images from prepare's shards on disk (stages/lib/"
                   "shards.py, normalised per batch); the bare loop keeps them in memory.")
@click.option("--image-size", default=16, show_default=True)
@click.option("--channels", default=1, show_default=True, type=click.Choice(["1", "3"]))
@click.option("--processed", type=click.Path(exists=True, file_okay=False),
              help="Time on the shards a prepare wrote in this folder (classification: its "
                   "meta.json, train and val splits) instead of random ones; the bare loop "
                   "holds the train split in memory (float32: 12 bytes a pixel of RGB), so "
                   "--samples, --image-size and --channels do not apply.")
def main(epochs, params_path, samples, shards, image_size, channels, processed):
    """Print stage samples/s, bare samples/s and their ratio."""
    import dataclasses

    import torch

    from bench.paired import paired_fit, rates
    from stages.lib.params import load
    from stages.tasks import current
    from stages.tasks.classification.model import build_model
    from stages.lib.train.determinism import set_deterministic
    from stages.lib.train.loop import make_optimizer, setup

    p = load("train", params_path)
    p = dataclasses.replace(p, epochs=epochs + 1, nproc=1)
    g = torch.Generator().manual_seed(0)
    c, size = int(channels), image_size
    x = torch.randn(samples, c, size, size, generator=g)
    y = torch.randint(0, 10, (samples,), generator=g)
    meta = {"classes": [str(i) for i in range(10)], "channels": c}
    data = (x, y, x[:64], y[:64])
    if processed:  # prepare's own shards; the bare loop gets the train split in memory
        from stages.lib.data.shards import load_split

        x_train, y_train, meta = load_split("train", processed, torch=True)
        x_val, y_val, _ = load_split("val", processed, torch=True)
        x, y = x_train[:], y_train[:]
        samples, c = len(x), meta["channels"]
        data = (x_train, y_train, x_val, y_val)
    elif shards:  # the same samples as uint8 shards; the bare loop gets them normalised in memory
        import tempfile

        from stages.lib.modality.imagecore import normalize
        from stages.lib.data.shards import load_split, write_processed

        pixels = torch.randint(0, 256, (samples, size, size, c), generator=g,
                               dtype=torch.uint8).numpy()
        tmp = tempfile.mkdtemp(prefix="bench-shards-")
        write_processed(tmp, {"train": (pixels, y.numpy()), "val": (pixels[:64], y[:64].numpy())},
                        {**meta, "mean": [0.5] * c, "std": [0.5] * c})
        x = torch.from_numpy(normalize(pixels, [0.5] * c, [0.5] * c))
        x_train, y_train, _ = load_split("train", tmp, torch=True)
        x_val, y_val, _ = load_split("val", tmp, torch=True)
        data = (x_train, y_train, x_val, y_val)
    set_deterministic(p.deterministic)
    run = setup(p, meta, current(params_path))
    torch.manual_seed(p.seed)
    bare_model = build_model(p.model, len(meta["classes"]), c)
    bare_opt = make_optimizer(p, bare_model)
    bare_model.train()
    # per epoch: [(stage seconds, bare seconds, samples)]
    steps = paired_fit(p, run, data, lambda idx: bare_step(bare_model, bare_opt, x, y, idx))
    timed = [s for epoch in steps[1:] for s in epoch]
    stage, bare = rates(steps[1:])
    per_epoch = statistics.median(sum(b for _, b, _ in e) / sum(s for s, _, _ in e)
                                  for e in steps[1:])
    click.echo(f"threads {torch.get_num_threads()}, model {p.model}, batch {p.batch_size}, "
               f"{samples} samples, {epochs} timed epochs ({len(timed)} step pairs)"
               + (", stage reading shards" if shards or processed else ""))
    click.echo(f"stage loop: {stage:9.1f} samples/s")
    click.echo(f"bare loop:  {bare:9.1f} samples/s")
    click.echo(f"ratio stage/bare: {stage / bare:.3f} (median of per-epoch ratios: "
               f"{per_epoch:.3f}; target >= 0.95)")


if __name__ == "__main__":
    main()
