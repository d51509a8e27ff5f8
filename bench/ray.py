"""Benchmark Ray against the local path (issue 31): predict, and prepare (bench/ray_prepare.py).

    python -m bench.ray [--what predict|prepare|both] [--images 10000] [--model M]
                        [--batch-size 64]

predict: --images small PNGs (32x32 grey, seeded) are written to a temp folder and predicted
by `python -m tools.predict` twice, locally and with a bare --ray (a local cluster on every
core), both in this run; then each again on one batch, which measures the fixed
start-up cost (process, model load; for Ray also the cluster start and the actors' model
loads). Prints each wall time, the start-up costs, the throughput ratio Ray / local (end to
end and without the start-up), checks that both wrote the same bytes, and projects 10
machines and 10 million images from these figures and the driver's own cost per file (listing
and writing a row, measured here: the driver does that alone, whatever the cluster's size).
The driver's peak RSS on N images against one batch shows its memory flat in N.

The model: --model, else this project's models/model.onnx when `dvc repro` built it, else a
small copy is trained first (20 images per class, 1 epoch: the same architecture, so the same
inference cost).

prepare: bench/ray_prepare.py's bench_prepare(images), imported only for it (skipped, saying
so, while that file is not there).
"""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent

MACHINES, PROJECTED = 10, 10_000_000


def make_images(folder: Path, count: int) -> None:
    """count seeded 32x32 grey PNGs, 1,000 per subfolder."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(count):
        path = folder / f"{i // 1000:04d}" / f"{i:07d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (32, 32), dtype=np.uint8), "L").save(path)


def timed_predict(source: Path, out: Path, model: Path, batch_size: int, ray_args):
    """(wall seconds, the driver's peak RSS in MiB) of one `python -m tools.predict` run (which
    must succeed); the cluster's processes are not the driver's."""
    cmd = [sys.executable, "-m", "tools.predict", str(source), "--model", str(model),
           "--batch-size", str(batch_size), "--out", str(out), *ray_args]
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=log,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            log.seek(0)
            raise click.ClickException(f"{' '.join(cmd)} failed:\n"
                                       f"{log.read()[-2000:].decode(errors='replace')}")
    return seconds, usage.ru_maxrss / 1024


def driver_cost(folder: Path, model_path: Path) -> float:
    """Seconds per file the driver spends alone: listing it and writing its row."""
    from tools.inference import load
    from tools.predict.inputs import iter_inputs
    from tools.predict.rowfile import format_row, output_fields

    model = load("onnxruntime", model_path, 1)
    fields = output_fields(model)
    start = time.perf_counter()
    paths = list(iter_inputs([str(folder)]))
    row = {"path": "", **model.task.empty_prediction(), "error": "", "model": "0" * 64}
    with open(os.devnull, "w") as f:
        for p in paths:
            f.write(format_row({**row, "path": p}, "jsonl", fields))
    return (time.perf_counter() - start) / len(paths)


def find_model(model: Path | None, scratch: Path) -> Path:
    if model is not None:
        return model
    if (ROOT / "models/model.onnx").is_file():
        return ROOT / "models/model.onnx"
    from tools.project import copy_project, dvc

    click.echo("no models/ here: training a small copy (20 images per class, 1 epoch)")
    project = copy_project(ROOT, scratch / "project",
                           params={"sample.per_class": 20, "train.epochs": 1})
    dvc(project, "repro")
    return project / "models/model.onnx"


def bench_predict(count: int, model: Path | None, batch_size: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as scratch:
        scratch = Path(scratch)
        model = find_model(model, scratch)
        images, one = scratch / "images", scratch / "one"
        make_images(images, count)
        make_images(one, batch_size)
        runs = {}
        for name, extra in (("local", []), ("ray", ["--ray"])):
            startup, rss_one = timed_predict(one, scratch / f"{name}-one.jsonl", model,
                                             batch_size, extra)
            wall, rss = timed_predict(images, scratch / f"{name}.jsonl", model, batch_size,
                                      extra)
            runs[name] = {"startup": startup, "wall": wall, "rss_one": rss_one, "rss": rss}
        same = (scratch / "local.jsonl").read_bytes() == (scratch / "ray.jsonl").read_bytes()
        per_file = driver_cost(images, model)
    local, ray = runs["local"], runs["ray"]
    rate = {k: count / max(v["wall"] - v["startup"], 1e-9) for k, v in runs.items()}
    click.echo(f"predict, {count} images of 32x32, batch {batch_size}, {os.cpu_count()} "
               f"cores, model {model}")
    for name, r in runs.items():
        click.echo(f"  {name:5}: {r['wall']:.1f} s wall ({count / r['wall']:.0f} images/s end "
                   f"to end); start-up {r['startup']:.1f} s (one batch); "
                   f"{rate[name]:.0f} images/s without it; driver peak RSS "
                   f"{r['rss']:.0f} MiB ({r['rss_one']:.0f} MiB on one batch)")
    click.echo(f"  ratio Ray / local: {local['wall'] / ray['wall']:.2f}x end to end, "
               f"{rate['ray'] / rate['local']:.2f}x without the start-up "
               f"(target >= 0.8x); Ray's fixed start-up cost {ray['startup']:.1f} s "
               f"(local {local['startup']:.1f} s); rows byte-identical: {same}")
    machine = rate["ray"]
    driver = 1 / per_file
    cluster = min(MACHINES * machine, driver)
    hours = (ray["startup"] + PROJECTED / cluster) / 3600
    click.echo(f"  projection, {MACHINES} machines like this one, {PROJECTED:,} images: "
               f"{MACHINES} x {machine:.0f} images/s = {MACHINES * machine:.0f} images/s, "
               f"capped by the driver's listing and writing at {driver:.0f} files/s "
               f"({per_file * 1e6:.1f} us a file) -> {cluster:.0f} images/s, "
               f"{hours:.2f} h plus start-up {ray['startup']:.0f} s (assumes the images on "
               f"storage every node reads at that rate, and each machine's decode and model "
               f"as here)")


@click.command()
@click.option("--what", type=click.Choice(["predict", "prepare", "both"]), default="both",
              show_default=True)
@click.option("--images", "count", type=click.IntRange(min=1), default=10_000,
              show_default=True)
@click.option("--model", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              default=None, help="An ONNX classification model (default: see above).")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
def main(what, count, model, batch_size):
    """Ray against the local path: throughput ratios measured in one run."""
    if what in ("predict", "both"):
        bench_predict(count, model, batch_size)
    if what in ("prepare", "both"):
        try:
            from bench import ray_prepare
        except ImportError:
            click.echo("prepare: bench/ray_prepare.py is not there yet (issue 31, prepare "
                       "part); skipped")
            return
        ray_prepare.bench_prepare(count)


if __name__ == "__main__":
    main()
