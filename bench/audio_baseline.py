"""Audio and speech: the pipeline's model against a plain baseline, and its train loop against a
bare PyTorch loop, on the features a pipeline run prepared.

Run from anywhere on a finished `dvc repro` of `task: audio` or `task: speech` (--run: its
root; it reads params.yaml, data/processed/'s shards, data/split/test.csv and
metrics/eval.json there):

1. Baseline: a plain model written here, trained with a bare loop (AdamW, cosine LR over the
   budget, no augmentation; speech: a 5% warm-up and gradients clipped at norm 5) on the run's
   train shards for --cpu-seconds of this process's CPU time (user + sys: give the train
   stage's own), then scored on the same test shards. audio: a
   torchaudio-tutorial-style KWS CNN (three conv/BN/ReLU blocks, max pooling, global average
   pooling), top-1 against the run's test accuracy; speech: a Conv1d frontend (stride 2) + one
   BiGRU layer + CTC, greedy CER/WER (stages/tasks/common/ctc.py's scores, as evaluate) against the
   run's.
2. Throughput: the train stage's loop (stages.lib.train.loop.fit, the run's train params, reading
the
   shards) against a bare loop over the same train split held in memory, step by step on the
   same batches (bench/paired.py, as bench/train.py); augmentation off in both, the first epoch
   warm-up. Target: stage / bare >= 0.95.

    python -m bench.audio_baseline --run /tmp/ab-run --cpu-seconds 25 [--epochs 2] [--threads 1]
"""
import math
import os
import statistics
import time

import click


def kws_cnn(classes: int, channels: int = 1):
    """A small keyword-spotting CNN over N x C x mels x frames (about 0.1M parameters)."""
    from torch import nn

    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(*block(channels, 32), nn.MaxPool2d(2), *block(32, 64), nn.MaxPool2d(2),
                         *block(64, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(128, classes))


def ctc_model(classes: int, mels: int, width: int = 128):
    """A small CTC model: N x 1 x mels x T -> N x ceil(T/2) x classes logits (class 0 blank)."""
    from torch import nn

    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Sequential(nn.Conv1d(mels, width, 5, stride=2, padding=2),
                                      nn.BatchNorm1d(width), nn.ReLU())
            self.gru = nn.GRU(width, width, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(2 * width, classes)

        def forward(self, x):
            h = self.conv(x.flatten(1, 2)).transpose(1, 2)
            return self.fc(self.gru(h)[0])

    return Small()


def ctc(logits, y):
    """CTC loss of N x T x C logits against [length, codes..] targets (blank 0)."""
    import torch
    import torch.nn.functional as F

    frames = torch.full((len(logits),), logits.shape[1], dtype=torch.long)
    return F.ctc_loss(logits.log_softmax(-1).transpose(0, 1), y[:, 1:].long(), frames,
                      y[:, 0].long(), zero_infinity=True)


def train_for(model, loss_fn, x, y, cpu_seconds: float, batch=32, lr=3e-3, seed=0,
              clip=0.0, warmup=0.0) -> tuple[int, float]:
    """Bare loop: shuffled batches until this process has spent cpu_seconds (user + sys) in it,
    the LR warmed up linearly over the first `warmup` of the budget (0: none) then cosine,
    gradients clipped to a global norm of `clip` (0: not); returns (epochs begun, CPU seconds
    spent)."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    start, epochs = time.process_time(), 0
    model.train()
    while time.process_time() - start < cpu_seconds:
        epochs += 1
        for idx in torch.randperm(len(x), generator=g).split(batch):
            frac = min((time.process_time() - start) / cpu_seconds, 1.0)
            if frac >= 1.0:
                break
            for group in opt.param_groups:
                ramp = min(1.0, frac / warmup) if warmup else 1.0
                group["lr"] = lr * ramp * 0.5 * (1 + math.cos(math.pi * frac))
            loss = loss_fn(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
    return epochs, time.process_time() - start


def predict(model, x, batch=256):
    """Eval-mode logits of every sample, as one tensor."""
    import torch

    model.eval()
    with torch.no_grad():
        return torch.cat([model(x[i:i + batch]) for i in range(0, len(x), batch)])


def top1(logits, y) -> float:
    return float((logits.argmax(1) == y.long()).float().mean())


def speech_scores(logits, truths, charset) -> dict:
    """Greedy-decoded CER/WER of logits against the transcripts, as evaluate scores them."""
    from stages.tasks.common.ctc import greedy, scores

    preds = [t for t, _ in greedy(logits.numpy(), charset)]
    return scores(truths, preds)


@click.command()
@click.option("--run", "run_dir", default=".", show_default=True,
              type=click.Path(exists=True, file_okay=False),
              help="Root of a finished pipeline run (task audio or speech).")
@click.option("--cpu-seconds", type=float, required=True,
              help="The baseline's training budget: the train stage's CPU seconds (user+sys).")
@click.option("--epochs", default=2, show_default=True,
              help="Throughput: timed epochs (+1 warm-up); 0 skips it.")
@click.option("--threads", default=1, show_default=True, help="torch threads.")
def main(run_dir, cpu_seconds, epochs, threads):
    """Print ours vs the baseline, then stage vs bare samples/s."""
    import dataclasses

    import torch
    import torch.nn.functional as F

    from bench.paired import bare_steps, paired_fit, rates
    from stages.lib.train.determinism import set_deterministic
    from stages.lib.io import read_csv, read_json
    from stages.lib.train.loop import make_optimizer, setup
    from stages.lib.params import load
    from stages.lib.data.shards import load_split
    from stages.tasks import current

    os.chdir(run_dir)
    torch.set_num_threads(threads)
    task = current("params.yaml")
    if task.name not in ("audio", "speech"):
        raise click.UsageError(f"{run_dir}/params.yaml: task {task.name}; this bench takes "
                               f"audio or speech")
    split = {s: load_split(s, "data/processed", torch=True, modality=task.modality_name)
             for s in ("train", "val", "test")}
    x, y, meta = split["train"]
    x, y = x[:], y[:]
    x_test, y_test = split["test"][0][:], split["test"][1][:]
    ours = read_json("metrics/eval.json")
    torch.manual_seed(0)
    if task.name == "audio":
        model, loss_fn = kws_cnn(len(meta["classes"]), x.shape[1]), F.cross_entropy
    else:
        model, loss_fn = ctc_model(1 + len(meta["charset"]), x.shape[2]), ctc
    params = sum(q.numel() for q in model.parameters())
    click.echo(f"task {task.name}: train {len(x)}, test {len(x_test)} clips of "
               f"{tuple(x.shape[1:])}; threads {torch.get_num_threads()}")
    # CTC: warm-up and clipping as the speech recipe (train.warmup_epochs, grad_clip 5)
    recipe = {"clip": 5.0, "warmup": 0.05} if task.name == "speech" else {}
    ran, spent = train_for(model, loss_fn, x, y, cpu_seconds, **recipe)
    logits = predict(model, x_test)
    click.echo(f"baseline ({params / 1e6:.2f}M params): {ran} epochs in {spent:.1f} CPU s "
               f"(budget {cpu_seconds:.1f})")
    if task.name == "audio":
        b = top1(logits, y_test)
        click.echo(f"test top-1: ours {ours['accuracy']:.4f}  baseline {b:.4f}  "
                   f"ratio {ours['accuracy'] / max(b, 1e-9):.3f}")
    else:
        truths = [r["text"] for r in read_csv("data/split/test.csv")]
        b = speech_scores(logits, truths, meta["charset"])
        for k in ("cer", "wer"):
            click.echo(f"test {k.upper()}: ours {ours[k]:.4f}  baseline {b[k]:.4f}  "
                       f"ratio baseline/ours {b[k] / max(ours[k], 1e-9):.2f}")
    if not epochs:
        return
    p = load("train", "params.yaml")
    off = {k: 0 for k in ("aug_masks", "aug_freq_shift") if hasattr(p, k)}
    p = dataclasses.replace(p, epochs=epochs + 1, nproc=1, threads=threads, **off)
    set_deterministic(p.deterministic)
    run = setup(p, meta, task)
    torch.manual_seed(p.seed)
    bare_model = task.build_model(p.model, meta)
    bare_opt = make_optimizer(p, bare_model)
    bare_model.train()

    bare_step = bare_steps(bare_opt, lambda idx: task.loss(bare_model(x[idx]), y[idx], p))

    data = (split["train"][0], split["train"][1], split["val"][0], split["val"][1])
    steps = paired_fit(p, run, data, bare_step)
    stage, bare = rates(steps[1:])
    per_epoch = statistics.median(sum(b for _, b, _ in e) / sum(s for s, _, _ in e)
                                  for e in steps[1:])
    click.echo(f"train loop ({p.model}, batch {p.batch_size}, {epochs} timed epochs, "
               f"augmentation off): stage {stage:.1f} samples/s, bare {bare:.1f} samples/s, "
               f"ratio {stage / bare:.3f} (median per epoch {per_epoch:.3f}; target >= 0.95)")


if __name__ == "__main__":
    main()
