"""Train throughput under train.kernels portable against native, per task, in one run.

For each task, a project copy with the task's sample recipe (fewer images, a few epochs) is
prepared once; then the real train stage runs there, fresh (no checkpoint), taking turns:
native, portable, native, portable... (--rounds each). Each run's samples/s is the mean of
its epochs after the first (warm-up), from the run record logs/train.json. The figure is the
ratio of the medians, portable / native, measured in this one run on this machine. Target:
portable >= 0.8x native on every task.

Both profiles use the same thread count (train.threads, default 2), so the ratio is the
kernels' cost alone.

    python -m bench.kernels [--tasks classification,detection,segmentation,ocr] [--rounds 3]
"""
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent

# per task: the sample recipe, cut to a size that trains a few epochs in under a minute here
RUNS = {
    "classification": {"train.epochs": 4},
    "detection": {"sample.images": 200, "train.epochs": 3, "train.warmup_epochs": 0},
    "segmentation": {"sample.images": 160, "train.epochs": 3, "train.warmup_epochs": 0},
    "ocr": {"sample.lines": 800, "train.epochs": 3, "train.warmup_epochs": 0},
}


def prepared(task: str, tmp: Path, threads: int) -> Path:
    from stages.tasks import get
    from tools.project import copy_project, dvc

    params = {"task": task, **get(task).sample_params, **RUNS[task], "train.threads": threads}
    project = copy_project(ROOT, tmp / task, params=params)
    dvc(project, "repro", "prepare")
    return project


def train_speed(project: Path, profile: str) -> float:
    """samples/s of one fresh train run under profile (epochs after the first)."""
    import yaml

    params = yaml.safe_load((project / "params.yaml").read_text())
    params["train"]["kernels"] = profile
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    shutil.rmtree(project / "models/checkpoints", ignore_errors=True)
    subprocess.run([sys.executable, "-m", "stages.train"], cwd=project, check=True,
                   capture_output=True)
    epochs = json.loads((project / "logs/train.json").read_text())["epochs"]
    return statistics.mean(e["samples_per_s"] for e in epochs[1:] or epochs)


@click.command()
@click.option("--tasks", default=",".join(RUNS), show_default=True,
              help="Comma-separated tasks to measure.")
@click.option("--rounds", default=3, show_default=True,
              help="Train runs per profile per task, taking turns; medians compared.")
@click.option("--threads", default=2, show_default=True, help="train.threads for both.")
def main(tasks, rounds, threads):
    """Print, per task, native and portable train samples/s (medians) and their ratio."""
    with tempfile.TemporaryDirectory(prefix="bench-kernels-") as tmp:
        click.echo(f"kernels: train samples/s, medians of {rounds} fresh runs per profile, "
                   f"{threads} threads, taking turns; ratio = portable / native (target >= 0.8)")
        click.echo(f"{'task':15} {'native':>9} {'portable':>9} {'ratio':>6}")
        for task in tasks.split(","):
            project = prepared(task, Path(tmp), threads)
            speed = {"native": [], "portable": []}
            for _ in range(rounds):
                for profile in speed:
                    speed[profile].append(train_speed(project, profile))
            native, portable = (statistics.median(speed[k]) for k in ("native", "portable"))
            click.echo(f"{task:15} {native:9.0f} {portable:9.0f} {portable / native:6.3f}  "
                       f"(native {', '.join(f'{v:.0f}' for v in speed['native'])}; portable "
                       f"{', '.join(f'{v:.0f}' for v in speed['portable'])})")


if __name__ == "__main__":
    main()
