"""Two experiments side by side (`dvc queue start -j 2`) against the same two one after the other.

    python -m bench.dvc_queue                  # the default sample, --epochs 30
    python -m bench.dvc_queue --oversubscribed # also -j 2 with each training on all cores (the
                                               # old behaviour: TRAIN_CONCURRENT_JOBS=1)

In a copy of the project, after one `dvc repro` (not timed): two `dvc exp run` one after the
other, then two queued experiments run with `dvc queue start -j 2`, timed from the start of the
queue to both having finished, then two more with `dvc queue start -j 1` (the queue's own
costs, a Celery worker and a temp workspace per experiment, on the sequential side too). Each
pair differs only in train.seed (distinct seeds for every run, so DVC's run cache never skips
a training). Prints the wall times and the ratios parallel / sequential (target <= 1.1) and
parallel / queued one at a time. With train.threads: 0 each queued training takes its
share of the cores (stages/lib/train/cores.py); logs of each run's thread count are in the
experiments' logs/train.json.
"""
import os
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent


def finished(root, names) -> bool:
    """Whether every named experiment has its ref: DVC writes refs/exps/.../<name> when it
    collects a finished experiment. One `git for-each-ref` (a few ms of one core)."""
    from tools.project import git

    refs = git(root, "for-each-ref", "--format=%(refname)", "refs/exps")
    return all(any(ref.endswith("/" + name) for ref in refs.split()) for name in names)


def queued_pair(root, seeds, env=None, jobs: int = 2) -> float:
    """Queue two experiments, run them with -j `jobs`; the seconds until both are done.

    The wait polls the experiments' git refs every 0.2 s. (It used to poll `dvc queue status`
    every 0.5 s: each call is a DVC process of ~0.8 s of CPU, so the poll alone took about half
    a core from the two trainings it timed, on a 2-core machine a quarter of what the parallel
    run had, and no share of the sequential run's.) `dvc queue status` is asked only every
    20 s, to notice a failed experiment, and once at the end."""
    from tools.project import dvc

    names = [f"q{jobs}-{seed}" for seed in seeds]
    for seed, name in zip(seeds, names, strict=True):
        dvc(root, "exp", "run", "--queue", "-S", f"train.seed={seed}", "-n", name)
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        tic = time.perf_counter()
        dvc(root, "queue", "start", "-j", str(jobs))
        last_status = tic
        while not finished(root, names):
            time.sleep(0.2)
            if time.perf_counter() - last_status > 20:
                last_status = time.perf_counter()
                status = dvc(root, "queue", "status").stdout
                if "Queued" not in status and "Running" not in status:
                    break  # ended without both refs: failed
        seconds = time.perf_counter() - tic
    finally:
        os.environ.clear()
        os.environ.update(saved)
    deadline = time.perf_counter() + 60
    while True:  # the workers mark the runs done just after collecting them
        status = dvc(root, "queue", "status").stdout
        if status.count("Success") >= 2 or ("Queued" not in status and "Running" not in status):
            break
        if time.perf_counter() > deadline:
            break
        time.sleep(1)
    if status.count("Success") < 2:
        raise SystemExit(f"the queue failed:\n{status}")
    dvc(root, "queue", "remove", "--success", check=False)
    stop_workers(root)
    return seconds


def stop_workers(root) -> None:
    """Stop this queue's workers and wait until no queue worker is left on the machine (the
    bench expects a machine of its own). A worker lingers after its queue
    empties, and `dvc queue start -j 1` then leaves the next pair to the two workers still
    alive: the "one at a time" run was a second parallel run (and an env set for the next
    start never reached them)."""
    from stages.lib.train.cores import queue_workers
    from tools.project import dvc

    dvc(root, "queue", "stop", check=False)
    deadline = time.perf_counter() + 120
    while queue_workers() and time.perf_counter() < deadline:
        time.sleep(0.5)
    if queue_workers():
        raise SystemExit("the queue's workers did not stop within 120 s")


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
    queued = queued_pair(root, (7, 8), jobs=1)
    click.echo(f"sequential (two dvc exp run): {sequential:.1f} s")
    click.echo(f"sequential through the queue (dvc queue start -j 1): {queued:.1f} s")
    click.echo(f"parallel (dvc queue start -j 2, each its share of the cores): {parallel:.1f} s")
    click.echo(f"ratio parallel / sequential: {parallel / sequential:.3f} (target <= 1.1)")
    click.echo(f"ratio parallel / queued one at a time: {parallel / queued:.3f} (the queue's own "
               f"costs on both sides)")
    if oversubscribed:
        over = queued_pair(root, (5, 6), {"TRAIN_CONCURRENT_JOBS": "1"})
        click.echo(f"parallel, every training on all cores (oversubscribed): {over:.1f} s, "
                   f"ratio {over / sequential:.3f}")


if __name__ == "__main__":
    main()
