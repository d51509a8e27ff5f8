"""Train the task's model on data/processed/ and write models/model.pt.

Resumable: models/checkpoints/last.pt (every epoch, and every train.checkpoint_every_steps
optimiser steps) holds the whole training state; a re-run resumes from it when its fingerprint
(params + data + code) matches and otherwise starts fresh, saying why. Randomness is a pure
function of (seed, epoch, sample index) (stages/lib/train/augment.py), so a resumed run ends with
the same bytes as one that never stopped, whatever train.num_workers is.

Loud: the first non-finite loss or gradient stops the run naming the epoch, the step and the
samples of the batch; last.pt keeps the last good state.

Scales out: with train.nproc > 1 or train.nnodes > 1 the stage re-runs itself under torchrun
(DDP; several machines meet at train.rdzv_endpoint); global rank 0 alone writes. Concurrent
trainings (`dvc queue start -j N`) each take their share of the cores (stages/lib/train/cores.py).

The task (stages/tasks/) builds the model and gives the loss and the validation metric; the
loop, checkpoints, resume, DDP and the loud failure are the same for every task. They live in
stages/lib/: loop.py (the loop), checkpoint.py (checkpoints, resume, the fingerprint),
distributed.py (threads, device, torchrun, the collectives) and trainlog.py (dvclive,
TensorBoard). Here: the stage itself, fit with its logs and its failures' messages, the outs.

Test hooks (stages/lib/hooks.py): KILL_AT_STEP and POISON.
"""
import contextlib
import os
import sys
from pathlib import Path

import click

from stages.lib.train import checkpoint as ck
from stages.lib.train import trainlog
from stages.lib.train.checkpoint import TRAIN_SPLIT
from stages.lib.io import StageError, write_json
from stages.lib.train.loop import NonFinite, fit
from stages.lib.params import params_option

MODEL = Path("models/model.pt")
METRICS = Path("metrics/train.json")


def fit_logged(p, run, data, record, fingerprint, device, rank, world) -> None:
    """fit, with checkpoints, and on rank 0 its logs: the history so far replayed into
    plots/train/ (opening a Live dir clears it, so it never has gaps or duplicate steps), then
    each epoch, and TensorBoard events with train.tensorboard (stages/lib/train/trainlog.py)."""
    tb = trainlog.tensorboard(p, run, rank)
    on_checkpoint = ck.checkpointer(run, p, fingerprint, rank, world)
    with contextlib.ExitStack() as stack:
        on_epoch = None
        if rank == 0:
            live = stack.enter_context(trainlog.open_live(trainlog.LIVE_DIR))
            perf_live = None
            if run.state["epoch"] < p.epochs:  # keep the timings of the last run
                perf_live = stack.enter_context(trainlog.open_live(trainlog.PERF_LIVE_DIR))
            on_epoch = trainlog.epoch_logger(p, run, record, live, perf_live, tb)
            for rec in run.state["history"]:
                trainlog.log_history(live, rec, run.task.val_metric)
        fit_or_fail(p, run, data, record, on_epoch, on_checkpoint, tb, device, rank, world)
    if tb is not None:
        tb.close()


def fit_or_fail(p, run, data, record, on_epoch, on_checkpoint, tb, device, rank, world):
    """fit; a non-finite loss or gradient, an interrupt (Ctrl-C) or running out of memory is
    written to the run record (rank 0) and stops the stage with a message naming the fix."""
    import torch

    from stages.lib.model.provenance import write_run_record

    try:
        fit(p, run, data, on_epoch, on_checkpoint, device, rank, world,
            trainlog.step_logger(tb))
    except NonFinite as exc:
        paths = sample_paths()
        message = nonfinite_message(exc.info, paths)
        info = {"what": exc.info["what"], "epoch": exc.info["epoch"] + 1,
                "step": exc.info["step"], "batch": exc.info["batch"] + 1,
                "samples": batch_paths(exc.info, paths)}
        if rank == 0:
            write_run_record("train", {**record, "status": "failed", "error": message,
                                       "nonfinite": info})
        raise StageError(message) from None
    except KeyboardInterrupt:
        st = run.state
        message = (f"train: interrupted at epoch {st['epoch'] + 1} step {st['step']}; run "
                   f"`dvc repro` to resume from the last checkpoint ({ck.LAST}: written "
                   f"every epoch" + (f" and every {p.checkpoint_every_steps} steps"
                                     if p.checkpoint_every_steps else "") + ")")
        if rank == 0:
            write_run_record("train", {**record, "status": "interrupted", "error": message})
        click.echo(message, err=True)
        sys.exit(130)
    except torch.cuda.OutOfMemoryError:
        message = oom_message(p, device)
        if rank == 0:
            write_run_record("train", {**record, "status": "failed", "error": message})
        raise StageError(message) from None


def sample_paths() -> list[str]:
    """Relative paths of the train samples, in the order of the processed arrays."""
    from stages.lib.io import read_csv

    return [r["path"] for r in read_csv(TRAIN_SPLIT)]


def batch_paths(info, paths) -> list[str]:
    return sorted({paths[i] for idx in info["indices"] for i in idx.tolist()})


def nonfinite_message(info, paths) -> str:
    names = batch_paths(info, paths)
    return (f"non-finite {info['what']} at epoch {info['epoch'] + 1}, step {info['step']} "
            f"(batch {info['batch'] + 1} of the epoch); training stopped, "
            f"models/checkpoints/last.pt keeps the last good state. Samples in the batch: "
            f"{', '.join(names)}. Check these files, or lower train.lr / set train.grad_clip.")


def oom_message(p, device) -> str:
    return (f"out of memory on {device} with train.batch_size={p.batch_size}: lower "
            f"train.batch_size in params.yaml (raise train.grad_accum_steps to keep the "
            f"effective batch, or set train.precision to bf16/fp16).")


def write_outputs(p, run, meta, record, x_val, device) -> None:
    """Rank 0's outs: models/model.pt (the last epoch's weights, or best.pt's with train.keep:
    best; LoRA adapters merged), metrics/train.json and the finished run record."""
    from stages.lib.train import finetune
    from stages.lib.train.distributed import peak_memory_bytes
    from stages.lib.model.models import save_model
    from stages.lib.model.provenance import write_run_record

    task = run.task
    if p.keep == "best":  # best.pt's weights (the last epoch's when it was the best)
        saved, why = ck.load(ck.BEST)
        if saved is None:
            raise StageError(f"train.keep is best but {why}; re-run `dvc repro`.")
        finetune.restore_state(getattr(run.model, "module", run.model),
                               saved["model"], p)
        if run.ema is not None:
            run.ema.load_state_dict(saved["ema"])
    if run.ema is not None:  # train.ema: the average becomes model.pt
        run.ema.copy_to(run.model)
    # LoRA: the adapters merged into plain weights; checked on a validation batch
    probe = x_val[0:min(len(x_val), 64)].to(device) if p.adapter != "none" else None
    model, merge_diff = finetune.merged(run.model, p, probe)
    keys = (*task.meta_keys, *task.modality.recipe_keys(meta))  # the input spec, as stored
    buckets = {"width_buckets": meta["width_buckets"]} if meta.get("width_buckets") else {}
    save_model(MODEL, model, {**{k: meta[k] for k in keys}, "model": p.model,
                              "task": task.name, **buckets,
                              "kernels": record["kernels"]["kernels"],
                              "trained_on": run.trained_on})
    write_json(METRICS, train_metrics(p, run, merge_diff))
    history, best = run.state["history"], run.state["best"]
    last, metric = history[-1], f"val_{task.val_metric}"
    write_run_record("train", {**record, "status": "ok", "metrics": last,
                               "peak_memory_bytes": peak_memory_bytes(device),
                               "init": run.facts.get("init")})
    kept = (f"the best epoch, {best['epoch']}: val {task.val_metric} "
            f"{history[best['epoch'] - 1][metric]:.4f}" if p.keep == "best"
            else f"the last epoch, {len(history)}: val {task.val_metric} {last[metric]:.4f}")
    click.echo(f"train: {kept} -> {MODEL} (train.keep: {p.keep})")


def train_metrics(p, run, merge_diff) -> dict:
    """metrics/train.json: the last epoch's losses and metric and the best epoch; with
    fine-tuning, what trained and what was loaded."""
    from stages.lib.train import finetune

    history, best = run.state["history"], run.state["best"]
    last, metric = history[-1], f"val_{run.task.val_metric}"
    metrics = {"epochs": len(history), "train_loss": last["train_loss"],
               "val_loss": last["val_loss"], metric: last[metric], "best_epoch": best["epoch"],
               **({"kept": "best"} if p.keep == "best" else {})}
    facts = run.facts
    if finetune.finetuning(p):  # the default run's file keeps its bytes
        metrics.update({k: facts[k] for k in ("params_trainable", "params_total")})
        if "init" in facts:  # loaded tensors as a count; the others by name
            metrics["init"] = {**facts["init"], "loaded": len(facts["init"]["loaded"])}
        if merge_diff is not None:
            metrics["lora_merge_max_abs_diff"] = merge_diff
    return metrics


@click.command()
@params_option
def main(params_path):
    """Train on data/processed/ and write models/model.pt, models/checkpoints/{last,best}.pt,
    metrics/train.json and plots/train/ (dvclive history).

    Reads the `train` section of the params file. Resumes from models/checkpoints/last.pt
    when its fingerprint (params, data, code) matches; otherwise starts fresh and says why.
    With train.nproc > 1 it re-runs itself under torchrun. The run record goes to
    logs/train.json and per-epoch timings and memory to logs/train_live/ (both untracked).
    """
    from stages.tasks import open_stage

    task, params, _ = open_stage("train", params_path)  # first: params that do not fit stop
    p = params["train"]
    if (p.nproc > 1 or p.nnodes > 1) and "LOCAL_RANK" not in os.environ:
        from stages.lib.train.distributed import relaunch_under_torchrun

        relaunch_under_torchrun(p, params_path)
        return
    from stages.lib.train.kernels import use

    kernels = use(p.kernels, p.threads, click.echo)  # before torch loads: it picks the kernels
    import torch

    from stages.lib import hooks
    from stages.lib.train.distributed import start_process, system_memory_bytes, trained_on
    from stages.lib.train.loop import bucket_widths, first_step_check, setup
    from stages.lib.model.provenance import run_record, write_run_record
    from stages.lib.data.shards import load_split

    p, cores, device, rank, world = start_process(p)
    # views over the memory-mapped shards: a batch is read and normalised when it is drawn
    x_train, y_train, meta = load_split("train", torch=True)
    x_val, y_val, _ = load_split("val", torch=True)
    if hooks.value("POISON"):
        x_train.poisoned.add(sample_paths().index(hooks.value("POISON")))
    fingerprint = ck.run_fingerprint(p, task, cores)
    run = setup(p, meta, task, device)
    if meta.get("width_buckets"):  # lines in width buckets: batches and validation per bucket
        run.widths = bucket_widths(meta, task)
    message = ck.resume(run, fingerprint, rank, world)
    click.echo(f"train: {message}")
    run.trained_on = trained_on(p, device)
    record = {**run_record("train", p), "world_size": world, **cores, "kernels": kernels,
              "device_name": device, "trained_on": run.trained_on,
              "device_memory_bytes": torch.cuda.get_device_properties(device).total_memory
              if device != "cpu" else system_memory_bytes(),
              "resume": message, "fingerprint": fingerprint, "status": "running", "epochs": []}
    if rank == 0:
        write_run_record("train", record)
    problem = first_step_check(p, run, (x_train, y_train, x_val, y_val), device, rank, world)
    if problem:
        if rank == 0:
            write_run_record("train", {**record, "status": "failed", "error": problem})
        raise StageError(problem)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        run.model = DistributedDataParallel(run.model)
    fit_logged(p, run, (x_train, y_train, x_val, y_val), record, fingerprint, device, rank,
               world)
    if rank == 0:
        write_outputs(p, run, meta, record, x_val, device)
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()


if __name__ == "__main__":
    main()
