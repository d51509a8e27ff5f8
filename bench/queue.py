"""Two experiments side by side (`dvc queue start -j 2`) against the same two one after the other.

    python bench/queue.py                  # the default sample, --epochs 30
    python bench/queue.py --oversubscribed # also -j 2 with each training on all cores (the
                                           # old behaviour: TRAIN_CONCURRENT_JOBS=1)

In a copy of the project, after one `dvc repro` (not timed): two `dvc exp run` one after the
other, then two queued experiments run with `dvc queue start -j 2`, timed from the start of the
queue to both having finished. Each pair differs only in train.seed (distinct seeds for every
run, so DVC's run cache never skips a training). Prints both wall times and the ratio
parallel / sequential: target <= 1.1. With train.threads: 0 each queued training takes its
share of the cores (stages/lib/cores.py); logs of each run's thread count are in the
experiments' logs/train.json.
"""
import sys

# ruff: noqa: E402
# bench/ first on sys.path: bench/queue.py would shadow the standard library's queue module
_BENCH = __import__("os").path.dirname(__import__("os").path.abspath(__file__))
sys.path[:] = [p for p in sys.path if __import__("os").path.abspath(p or ".") != _BENCH]

# this file's folder first on sys.path would make this file the standard library's queue
sys.path[:] = [p for p in sys.path if p != sys.path[0] or not p.endswith("bench")]
import os  # noqa: E402
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def queued_pair(root, seeds, env=None) -> float:
    """Queue two experiments, run them with -j 2; the seconds until both are done."""
    from tools.project import dvc

    for seed in seeds:
        dvc(root, "exp", "run", "--queue", "-S", f"train.seed={seed}", "-n", f"par-{seed}")
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        tic = time.perf_counter()
        dvc(root, "queue", "start", "-j", "2")
        while True:
            status = dvc(root, "queue", "status").stdout
            if "Queued" not in status and "Running" not in status:
                break
            time.sleep(0.5)
        seconds = time.perf_counter() - tic
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if status.count("Success") < 2:
        raise SystemExit(f"the queue failed:\n{status}")
    dvc(root, "queue", "remove", "--success", check=False)
    return seconds


@click.command()
@click.option("--epochs", default=30, show_default=True, help="train.epochs of each run.")
@click.option("--work", default="/tmp/queue-bench", show_default=True, type=click.Path())
@click.option("--oversubscribed", is_flag=True, help="Also time -j 2 with all cores each.")
def main(epochs, work, oversubscribed):
    """Print sequential and parallel wall times and their ratio (target <= 1.1)."""
    import shutil

    from tools.project import copy_project, dvc, git

    work = Path(work)
    shutil.rmtree(work, ignore_errors=True)
    root = copy_project(ROOT, work / "project", params={"train.epochs": epochs})
    dvc(root, "repro")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "baseline")
    tic = time.perf_counter()
    for seed in (1, 2):
        dvc(root, "exp", "run", "-S", f"train.seed={seed}", "-n", f"seq-{seed}")
    sequential = time.perf_counter() - tic
    parallel = queued_pair(root, (3, 4))
    click.echo(f"sequential (two dvc exp run): {sequential:.1f} s")
    click.echo(f"parallel (dvc queue start -j 2, each its share of the cores): {parallel:.1f} s")
    click.echo(f"ratio parallel / sequential: {parallel / sequential:.3f} (target <= 1.1)")
    if oversubscribed:
        over = queued_pair(root, (5, 6), {"TRAIN_CONCURRENT_JOBS": "1"})
        click.echo(f"parallel, every training on all cores (oversubscribed): {over:.1f} s, "
                   f"ratio {over / sequential:.3f}")


if __name__ == "__main__":
    main()
