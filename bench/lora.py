"""Peak memory and step time of LoRA against full fine-tuning: same model, same batch.

Each mode runs in its own fresh process (so one's peak memory cannot hide the other's): the
train stage's setup() builds train.model from the same starting weights (a random-init file,
written once), with train.adapter none (every parameter trains) or lora (the adapters and the
head), then times optimiser steps (forward, cross-entropy, backward, AdamW step) on one fixed
random batch. The first steps are warm-up and dropped; the median step time is reported.

Peak memory: on CUDA the allocator's peak (torch.cuda.max_memory_allocated) during the steps;
on CPU the growth of the process's peak resident set (ru_maxrss) from before the first step:
gradients, optimiser state and activations kept for backward.

    python -m bench.lora [--model resnet18] [--batch 64] [--size 64] [--steps 20]

Prints both modes and the ratios LoRA / full (time and memory: below 1 means LoRA is cheaper).
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent


def measure(mode: str, model: str, batch: int, size: int, steps: int, weights: str) -> dict:
    """One mode, in this process: {"step_s", "peak_bytes", "trainable", "total"}."""
    import resource
    import statistics
    import time

    import torch

    from stages.lib.params import Train
    from stages.tasks import default_task

    device = "cuda" if torch.cuda.is_available() else "cpu"
    p = Train(model=model, init_from=weights, adapter=mode, batch_size=batch)
    meta = {"classes": [str(i) for i in range(10)], "channels": 3, "image_size": size,
            "mean": [0.5] * 3, "std": [0.5] * 3}
    from stages.lib.train.loop import setup

    run = setup(p, meta, default_task(), device)
    net, opt, task = run.model, run.opt, run.task
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, size, size, generator=gen).to(device)
    y = torch.randint(0, 10, (batch,), generator=gen).to(device)
    net.train()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times = []
    for _ in range(steps):
        tic = time.perf_counter()
        loss = task.loss(net(x), y, p)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - tic)
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0
    warm = max(1, steps // 4)
    return {"mode": mode, "device": device, "step_s": statistics.median(times[warm:]),
            "peak_bytes": peak, "trainable": run.facts["params_trainable"],
            "total": run.facts["params_total"], "threads": torch.get_num_threads()}


@click.command()
@click.option("--model", default="resnet18", show_default=True)
@click.option("--batch", default=64, show_default=True)
@click.option("--size", default=64, show_default=True, help="image side, RGB")
@click.option("--steps", default=20, show_default=True)
@click.option("--child", type=click.Choice(["none", "lora"]), hidden=True)
@click.option("--weights", hidden=True, default="")
def main(model, batch, size, steps, child, weights):
    """LoRA vs full fine-tuning: peak memory and median step time, same model and batch."""
    if child:
        print(json.dumps(measure(child, model, batch, size, steps, weights)))
        return
    import torch
    import torchvision

    with tempfile.TemporaryDirectory() as tmp:
        weights = str(Path(tmp) / "start.pt")
        torch.manual_seed(0)
        torch.save(torchvision.models.get_model(model).state_dict(), weights)
        results = {}
        for mode in ("none", "lora"):  # full fine-tuning first: the baseline
            out = subprocess.run([sys.executable, "-m", "bench.lora", "--model", model, "--batch",
                                  str(batch), "--size", str(size), "--steps", str(steps),
                                  "--child", mode, "--weights", weights], cwd=ROOT,
                                 capture_output=True, text=True, check=True)
            results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    full, lora = results["none"], results["lora"]
    print(f"{model}, batch {batch} of 3x{size}x{size}, {steps} steps, {full['device']}, "
          f"{full['threads']} threads")
    for name, r in (("full fine-tuning", full), ("LoRA", lora)):
        print(f"  {name:17s} trainable {r['trainable']:>10,} / {r['total']:,} "
              f"({r['trainable'] / r['total']:.1%})  step {r['step_s'] * 1000:8.1f} ms  "
              f"peak memory +{r['peak_bytes'] / 2**20:8.1f} MiB")
    print(f"  LoRA / full: step time {lora['step_s'] / full['step_s']:.2f}x, peak memory "
          f"{lora['peak_bytes'] / max(full['peak_bytes'], 1):.2f}x")


if __name__ == "__main__":
    main()
