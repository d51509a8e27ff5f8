"""The train stage's logs on rank 0: dvclive and TensorBoard.

- plots/train/ (tracked, dvclive): the deterministic per-epoch history: train and val loss,
  the task's val metric, the learning rate;
- logs/train_live/ (untracked, dvclive): each epoch's seconds, samples/s and peak memory;
- logs/tensorboard/ (untracked, train.tensorboard): the same as events, and each step's loss
  and learning rate, for watching a running job.

dvclive and torch are imported inside the functions: a stage's --help never loads them.
"""
from pathlib import Path

import click

from stages.lib.io import StageError

LIVE_DIR = Path("plots/train")  # tracked: deterministic per-epoch history only
PERF_LIVE_DIR = Path("logs/train_live")  # untracked: epoch seconds, samples/s, peak memory
TENSORBOARD_DIR = Path("logs/tensorboard")  # untracked: train.tensorboard's event files


def tensorboard(p, run, rank):
    """train.tensorboard's SummaryWriter on rank 0 (None otherwise). Untracked, for watching a
    running job; it may lag a kill."""
    if rank != 0 or not p.tensorboard:
        return None
    from torch.utils.tensorboard import SummaryWriter

    # purge_step drops the events a killed run wrote after the checkpoint it resumes
    return SummaryWriter(str(TENSORBOARD_DIR), purge_step=run.state["step"] + 1)


def step_logger(tb):
    """fit's on_step: each optimiser step's loss and learning rate to TensorBoard (None
    without a writer)."""
    if tb is None:
        return None

    def on_step(step, loss, lr):
        tb.add_scalar("train/loss", loss, step)
        tb.add_scalar("lr", lr, step)

    return on_step


def log_history(live, rec, metric) -> None:
    """One epoch of the tracked history (plots/train/)."""
    for key, name in (("train_loss", "train/loss"), ("val_loss", "val/loss"),
                      (f"val_{metric}", f"val/{metric}"), ("lr", "lr")):
        live.log_metric(name, rec[key])
    live.next_step()


def epoch_logger(p, run, record, live, perf_live, tb):
    """Rank 0's on_epoch: the history (dvclive, tracked), the epoch's seconds, speed and peak
    memory (dvclive under logs/, and the run record), TensorBoard when on, and one line."""
    metric = run.task.val_metric

    def on_epoch(rec, perf):
        log_history(live, rec, metric)
        perf_live.step = rec["epoch"] - 1
        for key in ("epoch_seconds", "samples_per_s", "peak_memory_bytes"):
            perf_live.log_metric(key, perf[key])
        perf_live.next_step()
        record["epochs"].append(perf)
        if tb is not None:
            step = run.state["step"]
            for key, name in (("val_loss", "val/loss"), (f"val_{metric}", f"val/{metric}"),
                              ("train_loss", "train/epoch_loss")):
                tb.add_scalar(name, rec[key], step)
            for key in ("epoch_seconds", "samples_per_s", "peak_memory_bytes"):
                tb.add_scalar(f"perf/{key}", perf[key], step)
            tb.flush()
        click.echo(f"epoch {rec['epoch']}/{p.epochs}: train loss {rec['train_loss']:.4f} "
                   f"val loss {rec['val_loss']:.4f} val {metric} {rec[f'val_{metric}']:.4f} "
                   f"lr {rec['lr']:.2e} ({perf['samples_per_s']:.0f} samples/s)")

    return on_epoch


def open_live(directory):
    """dvclive's Live logging to directory. It opens the DVC repository, whose state database
    (SQLite, under DVC's site cache dir) a full disk or a file-size limit makes fail with a bare
    `sqlite3.OperationalError: disk I/O error`: that is a one-line StageError naming the folder
    and the fix."""
    import sqlite3

    from dvclive import Live

    try:
        return Live(dir=str(directory), dvcyaml=None, save_dvc_exp=False)
    except sqlite3.OperationalError as exc:
        where = dvc_site_cache_dir()
        raise StageError(f"train: DVC's state database in {where} cannot be written ({exc}: a "
                         f"full disk or a file-size limit, usually). Free space on {where}, or "
                         f"move it: dvc config core.site_cache_dir /a/larger/disk; then re-run."
                         ) from None


def dvc_site_cache_dir() -> str:
    """Where DVC keeps its per-repository state databases: core.site_cache_dir, else its
    default (/var/tmp/dvc on Linux)."""
    from dvc.dirs import site_cache_dir

    try:
        from dvc.config import Config

        dvc_dir = str(Path(".dvc").resolve())
        configured = Config(dvc_dir=dvc_dir, local_dvc_dir=dvc_dir)["core"].get("site_cache_dir")
    except Exception:  # noqa: BLE001 - a config DVC cannot read: its default
        configured = None
    return site_cache_dir(configured)
