"""How busy training keeps the device, per task: samples/s, the GPU's busy share, peak GPU
memory, the model's FLOPs per sample (forward + backward) and the TFLOP/s reached, at the
sample recipe's batch and at the GPU recipe's (tools/gpu_recipe.py), beside the CPU's samples/s
on the same data.

Each task trains stages.lib.train.loop.fit (the train stage's loop: device batches, batched
augmentation, no host sync per step, as params.yaml's defaults choose them for the device) on
synthetic data of its sample's shape and recipe, written as prepare's shards to a temporary
folder (classification: 16 px grey, 10 classes; detection: 224 px RGB with 8 boxes each;
segmentation: 128 px RGB masks of 4 classes; OCR: 32 x 192 lines of up to 24 codes). The
first epoch is warm-up; the figures are the later epochs'. GPU busy share: nvidia-smi's
utilization.gpu sampled every 200 ms while the timed epochs run (needs nvidia-smi). FLOPs:
torch.utils.flop_counter on one forward and backward of a batch on the CPU.

    python -m bench.gpu_busy [--task detection] [--samples 1024] [--epochs 2]

Without a GPU it prints the CPU columns and says the GPU columns need a GPU.
"""
import dataclasses
import shutil
import subprocess
import tempfile
import threading
import time

import click
import numpy as np

TASKS = ("classification", "detection", "segmentation", "ocr")


def synthetic(task: str, n: int, rng):
    """(uint8 N x H x W x C images, targets, meta) of the task's sample shape."""
    if task == "classification":
        x = rng.integers(0, 256, (n, 16, 16, 1), dtype=np.uint8)
        return x, rng.integers(0, 10, n).astype(np.int64), {
            "classes": [str(i) for i in range(10)], "image_size": 16, "channels": 1,
            "mean": [0.5], "std": [0.25]}
    if task == "detection":
        x = rng.integers(0, 256, (n, 224, 224, 3), dtype=np.uint8)
        xy = rng.uniform(0, 180, (n, 8, 2))
        wh = rng.uniform(8, 40, (n, 8, 2))
        y = np.concatenate([rng.integers(0, 3, (n, 8, 1)), xy, np.minimum(xy + wh, 224)], 2)
        return x, y.astype(np.float32), {
            "classes": ["a", "b", "c"], "max_boxes": 8, "image_size": 224, "channels": 3,
            "mean": [0.5] * 3, "std": [0.25] * 3}
    if task == "segmentation":
        x = rng.integers(0, 256, (n, 128, 128, 3), dtype=np.uint8)
        return x, rng.integers(0, 4, (n, 128, 128)).astype(np.uint8), {
            "classes": ["bg", "a", "b", "c"], "image_size": 128, "channels": 3,
            "mean": [0.5] * 3, "std": [0.25] * 3}
    x = rng.integers(0, 256, (n, 32, 192, 1), dtype=np.uint8)
    lengths = rng.integers(4, 24, n)
    y = np.zeros((n, 25), dtype=np.int32)
    y[:, 0] = lengths
    for i, k in enumerate(lengths):
        y[i, 1:1 + k] = rng.integers(1, 40, k)
    return x, y, {"charset": [chr(65 + i) for i in range(39)], "blank": 0, "max_len": 24,
                  "image_size": [32, 192], "channels": 1, "mean": [0.5], "std": [0.25]}


def recipe(task: str):
    """The task's sample recipe as train params."""
    from stages.lib.params import Train
    from stages.tasks import get

    t = get(task)
    keys = {k.split(".", 1)[1]: v for k, v in {**t.recipe, **t.sample_params}.items()
            if k.startswith("train.")}
    return dataclasses.replace(Train(), **keys)


def flops_per_sample(task, p, meta, x, y) -> float:
    """Forward + backward FLOPs of one sample (torch.utils.flop_counter, on the CPU)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from stages.lib.model.models import forward_loss
    from stages.lib.modality.imagecore import normalize

    model = task.build_model(p.model, meta)
    model.train()
    xb = torch.from_numpy(normalize(x[:4], meta["mean"], meta["std"]))
    with FlopCounterMode(display=False) as counter:
        forward_loss(model, xb, torch.from_numpy(y[:4]), task.loss, p).backward()
    return counter.get_total_flops() / 4


class Busy:
    """nvidia-smi's utilization.gpu sampled every 200 ms in a thread, while inside."""

    def __init__(self):
        self.samples, self.stop = [], threading.Event()

    def __enter__(self):
        if shutil.which("nvidia-smi"):
            self.thread = threading.Thread(target=self.sample, daemon=True)
            self.thread.start()
        return self

    def sample(self):
        while not self.stop.is_set():
            out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu",
                                  "--format=csv,noheader,nounits", "-i", "0"],
                                 capture_output=True, text=True).stdout.strip()
            if out.split("\n")[0].strip().isdigit():
                self.samples.append(int(out.split("\n")[0]))
            self.stop.wait(0.2)

    def __exit__(self, *exc):
        self.stop.set()

    def share(self):
        return sum(self.samples) / len(self.samples) / 100 if self.samples else None


def measure(task_name: str, p, data, meta, device: str, epochs: int) -> dict:
    """samples/s over the epochs after the first, busy share, peak memory of one fit."""
    import torch

    from stages.lib.train.loop import fit, setup
    from stages.tasks import get

    task = get(task_name)
    p = dataclasses.replace(p, epochs=epochs + 1, device=device, checkpoint_every_steps=0)
    run = setup(p, meta, task, device)
    rates, busy = [], Busy()
    if device != "cpu":
        torch.cuda.reset_peak_memory_stats(device)

    def on_epoch(record, perf):
        if perf["epoch"] == 1:
            busy.__enter__()
        else:
            rates.append(perf["samples_per_s"])

    fit(p, run, data, on_epoch=on_epoch, device=device)
    busy.__exit__()
    return {"samples_per_s": float(np.median(rates)) if rates else 0.0,
            "busy": busy.share(),
            "peak_bytes": torch.cuda.max_memory_allocated(device) if device != "cpu" else None}


@click.command()
@click.option("--task", "tasks", multiple=True, type=click.Choice(TASKS),
              help="Task(s) to measure; all four by default.")
@click.option("--samples", default=512, show_default=True, help="Synthetic train samples.")
@click.option("--epochs", default=2, show_default=True, help="Timed epochs (+1 warm-up).")
@click.option("--cpu-epochs", default=1, show_default=True,
              help="Timed epochs on the CPU (the CPU column; 0 skips it).")
@click.option("--gpu-batch", type=int, default=None,
              help="The GPU recipe's batch; default: tools/gpu_recipe.py's proposal.")
def main(tasks, samples, epochs, cpu_epochs, gpu_batch):
    """Print per task: samples/s on the CPU, and on the GPU at the recipe's batch and the GPU
    recipe's, with the busy share, peak memory and TFLOP/s."""
    import torch

    from stages.lib.data.shards import load_split, write_processed
    from stages.tasks import get
    from tools import gpu_recipe

    gpu = torch.cuda.is_available()
    click.echo(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, GPU: "
               + (torch.cuda.get_device_name(0) if gpu else "none"))
    if not gpu:
        click.echo("GPU columns (samples/s, busy share, peak memory, TFLOP/s at both batches) "
                   "need a GPU: run this on one (docs/gpu.md).")
    for name in tasks or TASKS:
        rng = np.random.default_rng(0)
        x, y, meta = synthetic(name, samples, rng)
        p = recipe(name)
        tmp = tempfile.mkdtemp(prefix=f"bench-gpu-{name}-")
        try:
            write_processed(tmp, {"train": (x, y), "val": (x[:64], y[:64])}, meta, 256)
            xt, yt, meta = load_split("train", tmp, torch=True)
            xv, yv, _ = load_split("val", tmp, torch=True)
            data = (xt, yt, xv, yv)
            flops = flops_per_sample(get(name), p, meta, x, y)
            line = f"{name:15s} batch {p.batch_size:4d}  {flops / 1e9:7.3f} GFLOP/sample"
            if cpu_epochs:
                cpu = measure(name, dataclasses.replace(p, device_batches="off"), data, meta,
                              "cpu", cpu_epochs)
                line += f"  CPU {cpu['samples_per_s']:8.1f} samples/s"
            click.echo(line)
            if not gpu:
                continue
            free, _ = torch.cuda.mem_get_info()
            proposal = dict((k, v) for k, v, _ in gpu_recipe.propose(
                p.batch_size, p.lr, p.warmup_epochs, p.epochs, free,
                gpu_recipe.BYTES_PER_ELEMENT * int(np.prod(x.shape[1:])), samples))
            big = gpu_batch or proposal.get("train.batch_size", p.batch_size)
            for batch in dict.fromkeys((p.batch_size, big)):
                q = dataclasses.replace(p, batch_size=batch)
                got = measure(name, q, data, meta, "cuda", epochs)
                rate = got["samples_per_s"]
                busy = f"{got['busy']:.0%}" if got["busy"] is not None else "n/a"
                click.echo(f"  GPU batch {batch:5d}: {rate:9.1f} samples/s, busy {busy}, peak "
                           f"{got['peak_bytes'] / 2 ** 30:.2f} GiB, "
                           f"{rate * flops / 1e12:.3f} TFLOP/s")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        time.sleep(0)


if __name__ == "__main__":
    main()
