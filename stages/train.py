"""Train the task's model on data/processed/ and write models/model.pt.

Resumable: models/checkpoints/last.pt (every epoch, and every train.checkpoint_every_steps
optimiser steps) holds the whole training state; a re-run resumes from it when its fingerprint
(params + data + code) matches and otherwise starts fresh, saying why. Randomness is a pure
function of (seed, epoch, sample index) (stages/lib/augment.py), so a resumed run ends with the
same bytes as one that never stopped, whatever train.num_workers is.

Loud: the first non-finite loss or gradient stops the run naming the epoch, the step and the
samples of the batch; last.pt keeps the last good state.

Scales out: with train.nproc > 1 or train.nnodes > 1 the stage re-runs itself under torchrun
(DDP; several machines meet at train.rdzv_endpoint); global rank 0 alone writes. Concurrent
trainings (`dvc queue start -j N`) each take their share of the cores (stages/lib/cores.py).

The task (stages/tasks/) builds the model and gives the loss and the validation metric; the
loop, checkpoints, resume, DDP and the loud failure are the same for every task.

Test hooks (stages/lib/hooks.py): KILL_AT_STEP and POISON.
"""
import contextlib
import math
import os
import sys
import time
from pathlib import Path

import click

from stages.lib import ema
from stages.lib.determinism import set_deterministic  # noqa: F401 (bench/ takes it from here)
from stages.lib.io import StageError, write_json
from stages.lib.params import load, params_option

MODEL = Path("models/model.pt")
METRICS = Path("metrics/train.json")
LIVE_DIR = Path("plots/train")  # tracked: deterministic per-epoch history only
PERF_LIVE_DIR = Path("logs/train_live")  # untracked: epoch seconds, samples/s, peak memory
TENSORBOARD_DIR = Path("logs/tensorboard")  # untracked: train.tensorboard's event files
PROCESSED = Path("data/processed")
TRAIN_SPLIT = Path("data/split/train.csv")


def epoch_order(n: int, seed: int, epoch: int):
    from stages.lib.augment import epoch_order as order

    return order(n, seed, epoch)


def lr_factor(p, epoch: int) -> float:
    """Linear warm-up over train.warmup_epochs, then cosine decay to 0 at train.epochs."""
    if epoch < p.warmup_epochs:
        return (epoch + 1) / (p.warmup_epochs + 1)
    span = p.epochs - p.warmup_epochs
    return 0.5 * (1 + math.cos(math.pi * (epoch - p.warmup_epochs) / span))


def make_optimizer(p, model):
    """model: a module (its trainable parameters) or the parameters/groups to optimise."""
    import torch

    params = [q for q in model.parameters() if q.requires_grad] \
        if isinstance(model, torch.nn.Module) else model
    if p.optimizer == "adamw":
        # fused: ATen's own vectorised step. The unfused step takes torch.sqrt, which on CPU
        # runs MKL's VML and gives other last bits on Intel than on AMD (stages/lib/kernels.py)
        return torch.optim.AdamW(params, lr=p.lr, weight_decay=p.weight_decay, fused=True)
    if p.optimizer == "sgd":
        return torch.optim.SGD(params, lr=p.lr, momentum=0.9, weight_decay=p.weight_decay,
                               nesterov=True)
    raise StageError(f"train.optimizer: unknown {p.optimizer!r}; use adamw or sgd.")


def evaluate_loss(model, x, y, task, batch_size=512, device="cpu", widths=None):
    """(mean loss, mean metric) of model on tensors x, y: the task's val_sums over n.
    widths (prepare.width_buckets: each sample's bucket width): each bucket's samples, in
    split order, cut to its width, as training and evaluate run them."""
    import torch

    model.eval()
    loss, metric = 0.0, 0
    if widths is None:
        chunks = [(slice(i, i + batch_size), None) for i in range(0, len(x), batch_size)]
    else:
        chunks = []
        for width in sorted(set(widths.tolist())):
            members = torch.from_numpy((widths == width).nonzero()[0].astype("int64"))
            chunks += [(members[i:i + batch_size], width)
                       for i in range(0, len(members), batch_size)]
    with torch.no_grad():
        for key, width in chunks:
            xb = x[key] if width is None else x[key][..., :width].contiguous()
            batch_loss, batch_metric = task.val_sums(model(xb.to(device)), y[key].to(device))
            loss += batch_loss
            metric += batch_metric
    return loss / len(x), metric / len(x)


def setup(p, meta, task, device="cpu"):
    """Fresh training state: seeded model (optionally from train.init_from, with frozen parts
    or LoRA adapters: stages/lib/finetune.py), optimizer, per-epoch LR schedule, GradScaler and
    the position {epoch, batch, step, ...}."""
    import torch

    from stages.lib import finetune

    torch.manual_seed(p.seed)
    model = task.build_model(p.model, meta)
    head = task.head(model) if finetune.finetuning(p) else ""  # only fine-tuning needs it
    targets = task.lora_targets(model) if p.adapter != "none" else ()
    model, facts, eval_modules = finetune.setup_model(model, p, head, targets)
    model.to(device)
    opt = make_optimizer(p, finetune.param_groups(model, p, head))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: lr_factor(p, e))
    scaler = torch.amp.GradScaler(torch.device(device).type, enabled=p.precision == "fp16")
    state = {"epoch": 0, "batch": 0, "step": 0, "loss_sum": 0.0, "seen": 0, "history": [],
             "best": None}
    return {"model": model, "opt": opt, "sched": sched, "scaler": scaler, "state": state,
            "task": task, "p": p, "facts": facts, "eval_modules": eval_modules,
            "ema": ema.build(model, p)}


def checkpoint(run, p, fingerprint) -> dict:
    """Everything needed to continue exactly where the run is now."""

    import torch

    from stages.lib.finetune import checkpoint_state

    model = getattr(run["model"], "module", run["model"])  # unwrap DDP
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return {**run["state"], "model": checkpoint_state(model, p),
            "optimizer": run["opt"].state_dict(),
            "scheduler": run["sched"].state_dict(), "scaler": run["scaler"].state_dict(),
            "ema": run["ema"].state_dict() if run["ema"] else None, "rng": rng,
            "params": resume_params(p), "fingerprint": fingerprint}


# train params that never change the training itself: left out of the checkpoint and of the
# resume fingerprint (train.keep only picks which weights become model.pt; the device is in
# the run record, logs/train.json's device_name)
NOT_RESUME_PARAMS = ("keep", "device")


def resume_params(p) -> dict:
    import dataclasses

    return {k: v for k, v in dataclasses.asdict(p).items() if k not in NOT_RESUME_PARAMS}


def pick_device(p) -> str:
    """train.device as a torch device: auto takes the local rank's GPU when one is visible."""
    import torch

    if p.device == "cpu" or p.device == "auto" and not torch.cuda.is_available():
        return "cpu"
    if not torch.cuda.is_available():
        raise StageError(f"train.device is {p.device} but no CUDA GPU is visible to torch "
                         f"(torch {torch.__version__}, CUDA build {torch.version.cuda}); set "
                         f"train.device: cpu (or auto), or check `nvidia-smi`.")
    if p.device.startswith("cuda:"):
        index = int(p.device[5:])
        if index >= torch.cuda.device_count():
            raise StageError(f"train.device is {p.device} but torch sees "
                             f"{torch.cuda.device_count()} GPU(s) (cuda:0 to "
                             f"cuda:{torch.cuda.device_count() - 1}); fix train.device.")
        return p.device
    return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"


def restore(run, ckpt) -> None:
    import torch

    from stages.lib.finetune import restore_state

    restore_state(getattr(run["model"], "module", run["model"]), ckpt["model"], run["p"])
    run["opt"].load_state_dict(ckpt["optimizer"])
    run["sched"].load_state_dict(ckpt["scheduler"])
    run["scaler"].load_state_dict(ckpt["scaler"])
    if run["ema"] is not None:  # the fingerprint holds train.ema: the checkpoint has one
        run["ema"].load_state_dict(ckpt["ema"])
    torch.set_rng_state(ckpt["rng"]["torch"])
    if "cuda" in ckpt["rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(ckpt["rng"]["cuda"])
    run["state"] = {k: ckpt[k] for k in run["state"]}


class NonFinite(Exception):
    """A non-finite loss or gradient: .info holds epoch, step and the batch's sample indices."""

    def __init__(self, info):
        super().__init__(info["what"])
        self.info = info


def agree_on_checkpoint(ckpt, message, fingerprint, rank, world):
    """Every rank resumes from the same state. Only global rank 0 writes last.pt, and on
    several machines torchrun may give rank 0 to another machine after a restart, so each rank
    offers the checkpoint it can resume and the most advanced one (lowest rank on a tie) is
    sent to all. Ranks whose data, code or params differ from rank 0's stop, naming why."""
    import torch.distributed as dist

    from stages.lib import checkpoint as ck

    offers = [None] * world
    dist.all_gather_object(offers, (fingerprint, ckpt["step"] if ckpt is not None else -1))
    for other, (theirs, _) in enumerate(offers):
        why = ck.mismatch(offers[0][0], theirs)
        if why:
            raise StageError(
                f"train: rank {other} cannot train with rank 0: {why}. Every machine needs the "
                f"same data/processed/, code, params and torch (and set train.threads when "
                f"their core counts differ).")
    best = max(range(world), key=lambda r: (offers[r][1], -r))
    if offers[best][1] < 0:
        return None, message
    box = [ckpt, message] if rank == best else [None, None]
    dist.broadcast_object_list(box, src=best)
    where = "" if best == rank else f" (rank {best}'s copy, sent to rank {rank})"
    return box[0], box[1] + where


def peak_memory_bytes(device) -> int:
    import torch

    if torch.device(device).type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def fit(p, run, data, on_epoch=None, on_checkpoint=None, device="cpu", rank=0, world=1,
        on_step=None):
    """Train from run["state"]'s position to train.epochs.

    data = (x_train, y_train, x_val, y_val): tensors, or the indexable views of
    stages/lib/shards.py (torch=True), which read and normalise a batch when it is drawn;
    run["widths"] (optional; prepare.width_buckets): (train, val) numpy bucket widths per
    sample: each batch holds one bucket, cut to its width (stages/lib/augment.py
    bucket_batches), and validation runs each bucket at its width;
    on_epoch(record, perf) after each epoch;
    on_checkpoint(kind) where kind is "step" (every train.checkpoint_every_steps steps) or
    "epoch"; on_step(step, loss, lr) after each optimiser step. Raises NonFinite on the first
    non-finite loss or gradient (before the step).
    """
    x_train, y_train, x_val, y_val = data
    trainable = [q for q in run["model"].parameters() if q.requires_grad]
    while run["state"]["epoch"] < p.epochs:
        epoch = run["state"]["epoch"]
        ds = epoch_batches(p, run, x_train, y_train, epoch, rank, world)
        seconds, seen = train_epoch(p, run, ds, trainable, device, world, on_step,
                                    on_checkpoint)
        record, improved = end_epoch(p, run, x_val, y_val, device, world)
        if on_checkpoint:
            on_checkpoint("best" if improved else "epoch")
        perf = {"epoch": epoch + 1, "epoch_seconds": seconds,
                "samples_per_s": seen * world / seconds if seconds > 0 else 0.0,
                "peak_memory_bytes": peak_memory_bytes(device)}
        if on_epoch:
            on_epoch(record, perf)
    return run


def epoch_batches(p, run, x_train, y_train, epoch: int, rank: int, world: int):
    """This rank's batches of the epoch (stages/lib/augment.py EpochBatches): the epoch's seeded
    order, padded and split over the ranks; with width buckets, one bucket per batch."""
    import torch

    from stages.lib.augment import EpochBatches, bucket_batches

    per_rank = p.batch_size // world
    if run.get("widths") is not None:  # prepare.width_buckets: one bucket per batch
        plan = bucket_batches(len(x_train), run["widths"][0], p.batch_size, p.seed, epoch,
                              rank, world)
        return EpochBatches(x_train, y_train, None, per_rank, p, epoch, run["task"], plan)
    order = epoch_order(len(x_train), p.seed, epoch)
    if world > 1:  # pad like DistributedSampler: every rank runs the same steps
        order = torch.cat([order, order[:(-len(order)) % world]])[rank::world]
    return EpochBatches(x_train, y_train, order, per_rank, p, epoch, run["task"])


def train_epoch(p, run, ds, trainable, device, world, on_step, on_checkpoint) -> tuple:
    """The epoch's batches from run["state"]'s batch on, an optimiser step every
    train.grad_accum_steps of them (and at the last): (seconds spent, not counting
    checkpoint writes, and samples this rank saw)."""
    from tqdm import tqdm

    from stages.lib import hooks
    from stages.lib.augment import batches

    st, epoch = run["state"], run["state"]["epoch"]
    run["model"].train()
    for module in run.get("eval_modules", ()):  # frozen BatchNorm (train.lora_batchnorm)
        module.eval()
    kill_at = int(hooks.value("KILL_AT_STEP") or 0)
    interrupt_at = int(hooks.value("INTERRUPT_AT_STEP") or 0)
    start, window, seconds, seen = st["batch"], [], 0.0, 0
    tic = time.perf_counter()
    bar = tqdm(batches(ds, start, p.num_workers), total=len(ds) - start, disable=None,
               desc=f"epoch {epoch + 1}/{p.epochs}", unit="batch", leave=False)
    for b, (idx, xb, yb) in enumerate(bar, start):
        window.append(idx)
        value = batch_backward(p, run, xb, yb, device)
        last = b + 1 == len(ds)
        where = {"epoch": epoch, "batch": b, "step": st["step"] + 1}
        if not (last or (b + 1) % p.grad_accum_steps == 0):
            if not math.isfinite(value):
                raise NonFinite({"what": f"loss {value}", **where, "indices": [idx]})
            st["loss_sum"] += value * len(idx)
            st["seen"] += len(idx)
            seen += len(idx)
            continue
        optimizer_step(p, run, trainable, value, where, [idx], window, device, world)
        st["loss_sum"] += value * len(idx)
        st["seen"] += len(idx)
        st["step"] += 1
        if run["ema"] is not None:
            run["ema"].update(run["model"], st["step"])
        st["batch"] = b + 1
        window = []
        if on_step:
            on_step(st["step"], value, run["opt"].param_groups[0]["lr"])
        crash_hooks(st["step"], kill_at, interrupt_at)
        if on_checkpoint and p.checkpoint_every_steps and not last \
                and st["step"] % p.checkpoint_every_steps == 0:
            seconds += time.perf_counter() - tic
            on_checkpoint("step")
            tic = time.perf_counter()
        seen += len(idx)
    return seconds + time.perf_counter() - tic, seen


def batch_backward(p, run, xb, yb, device) -> float:
    """One batch's forward and the task's loss (under autocast with train.precision bf16 or
    fp16), and its backward, scaled for gradient accumulation (and by the GradScaler with
    fp16): the loss's value."""
    import torch

    from stages.lib.models import forward_loss

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(p.precision)
    xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
    autocast = torch.autocast(torch.device(device).type, dtype=dtype) if dtype \
        else contextlib.nullcontext()
    with autocast:
        loss = forward_loss(run["model"], xb, yb, run["task"].loss, p)
    scaled = loss if p.grad_accum_steps == 1 else loss / p.grad_accum_steps
    (run["scaler"].scale(scaled) if p.precision == "fp16" else scaled).backward()
    return loss.item()


def optimizer_step(p, run, trainable, value, where, batch, window, device, world) -> None:
    """Unscale (fp16), clip (train.grad_clip) or check the gradients, then step. A non-finite
    loss (batch: its indices) or gradient (window: the indices of every batch since the last
    step) on any rank raises NonFinite on every rank, before the step. fp16 checks no
    gradients: its GradScaler skips an overflowing step itself."""
    import torch

    opt, scaler = run["opt"], run["scaler"]
    fp16 = p.precision == "fp16"
    check_grads = not fp16
    if fp16:
        scaler.unscale_(opt)
    if p.grad_clip > 0:
        norm, kind = torch.nn.utils.clip_grad_norm_(trainable, p.grad_clip), "norm"
    elif check_grads:  # any nan or inf makes the sum non-finite; cheaper than a norm
        norm, kind = torch.stack([q.grad.sum() for q in trainable
                                  if q.grad is not None]).sum(), "sum"
    bad = [not math.isfinite(value), check_grads and not torch.isfinite(norm).item()]
    if world > 1:  # every rank stops together
        import torch.distributed as dist

        flags = torch.tensor([float(x) for x in bad], device=device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        bad = [bool(x) for x in flags.tolist()]
    if any(bad):
        what = f"loss {value}" if bad[0] else f"gradient {kind} {norm.item()}"
        raise NonFinite({"what": what, **where, "indices": batch if bad[0] else window})
    if fp16:  # the GradScaler skips a step whose gradients overflowed
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    opt.zero_grad(set_to_none=True)


def crash_hooks(step: int, kill_at: int, interrupt_at: int) -> None:
    """KILL_AT_STEP and INTERRUPT_AT_STEP (stages/lib/hooks.py): a kill or a Ctrl-C right
    after optimiser step N, as a crash or a user would."""
    import signal

    if kill_at and step == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if interrupt_at and step == interrupt_at:
        # as in a foreground terminal: a job started in the background (`cmd &`, as CI
        # may run the tests) inherits SIGINT ignored, and Python then never raises
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.kill(os.getpid(), signal.SIGINT)


def end_epoch(p, run, x_val, y_val, device, world) -> tuple[dict, bool]:
    """Close the epoch: the LR schedule's step, the train loss over every rank, the validation
    loss and metric, the best epoch so far, and the position moved to the next epoch.
    (the epoch's history record, whether it is the best so far)"""
    import torch

    st, task = run["state"], run["task"]
    epoch = st["epoch"]
    lr = run["opt"].param_groups[0]["lr"]
    run["sched"].step()
    loss_sum, count = st["loss_sum"], st["seen"]
    if world > 1:
        import torch.distributed as dist

        totals = torch.tensor([loss_sum, float(count)], dtype=torch.float64, device=device)
        dist.all_reduce(totals)
        loss_sum, count = totals.tolist()
    with ema.applied(run):  # train.ema: the average is what is validated (and kept)
        val_loss, val_metric = evaluate_loss(run["model"], x_val, y_val, task, device=device,
                                             widths=(run.get("widths") or (None, None))[1])
    record = {"epoch": epoch + 1, "train_loss": loss_sum / count, "val_loss": val_loss,
              f"val_{task.val_metric}": val_metric, "lr": lr}
    st["history"].append(record)
    if p.best_metric == "val_loss":
        score = -val_loss
    else:
        score = val_metric if task.val_higher_is_better else -val_metric
    improved = st["best"] is None or score > st["best"]["score"]
    if improved:
        st["best"] = {"score": score, "epoch": epoch + 1}
    st.update(epoch=epoch + 1, batch=0, loss_sum=0.0, seen=0)
    return record, improved


def train(p, x_train, y_train, x_val, y_val, meta, log=None, task=None):
    """Train in memory from scratch; return (model, history). `log(epoch, record)` per epoch.
    task: classification unless given."""
    from stages.tasks import default_task

    set_deterministic(p.deterministic)
    run = setup(p, meta, task or default_task())
    on_epoch = (lambda rec, perf: log(rec["epoch"] - 1, rec)) if log else None
    fit(p, run, (x_train, y_train, x_val, y_val), on_epoch=on_epoch)
    if run["ema"] is not None:
        run["ema"].copy_to(run["model"])
    return run["model"], run["state"]["history"]


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


def torchrun_args(p, params_path) -> list[str]:
    """The torchrun command of this stage: one machine (--standalone) or train.nnodes machines
    meeting at train.rdzv_endpoint through the c10d rendezvous."""
    import sys

    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={p.nproc}"]
    if p.nnodes == 1:
        # --standalone picks a free rendezvous port: concurrent runs never meet
        cmd.append("--standalone")
    else:
        # every machine runs the same params, so the id is the same on each, and differs
        # between two runs with other params (they never join each other's rendezvous)
        import hashlib
        import json
        from dataclasses import asdict

        run_id = hashlib.sha256(json.dumps(asdict(p), sort_keys=True).encode()).hexdigest()[:16]
        cmd += [f"--nnodes={p.nnodes}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={p.rdzv_endpoint}", f"--rdzv-id=train-{run_id}"]
    return [*cmd, "-m", "stages.train", "--params", params_path]


def relaunch_under_torchrun(p, params_path) -> None:
    """Run this stage in train.nproc processes (per machine) under torchrun, each in a private
    temp dir."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="train-run-") as tmp:
        click.echo(f"train: running {p.nproc} processes under torchrun"
                   + (f" on each of {p.nnodes} machines" if p.nnodes > 1 else ""))
        rc = subprocess.call(torchrun_args(p, params_path), env={**os.environ, "TMPDIR": tmp})
    if rc != 0:
        raise StageError(f"train under torchrun ({p.nproc} x {p.nnodes} processes) failed with "
                         f"exit code {rc}; the first error is printed above.")


def set_threads(p) -> dict:
    """This process's share of the cores (stages/lib/cores.py): intra- and inter-op threads
    and DataLoader workers; what was chosen, for the run record."""
    import torch

    from stages.lib.cores import share

    threads, jobs = share(p.threads, torch.get_num_threads())
    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # set once per process, before any parallel work
        torch.set_num_interop_threads(threads)
    workers = min(p.num_workers, threads) if not p.threads else p.num_workers
    return {"threads": threads, "concurrent_jobs": jobs, "num_workers": workers}


def system_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def start_process(p) -> tuple:
    """This process's set-up before any data is read: deterministic algorithms, its share of
    the cores, its device and (under torchrun) the process group. (p with the DataLoader
    workers it was given, the cores chosen, device, rank, world)"""
    import dataclasses

    import torch

    set_deterministic(p.deterministic)
    cores = set_threads(p)
    p = dataclasses.replace(p, num_workers=cores["num_workers"])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = pick_device(p)
    if device != "cpu":
        torch.cuda.set_device(device)
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("nccl" if device != "cpu" else "gloo")
    return p, cores, device, rank, world


def run_fingerprint(p, task, cores) -> str:
    """What a checkpoint must match to be resumed: the params that change training, the data
    (data/processed/, the train split, train.init_from's file) and the code."""
    from stages.lib import checkpoint as ck
    from stages.lib.models import no_weights
    from stages.tasks import code_files

    # the thread count orders CPU float sums: the effective one, not train.threads' 0 (auto)
    params = {**resume_params(p), "task": task.name, "threads": cores["threads"]}
    # hidden files are other writers' temp files, not data
    data_files = sorted(f for f in PROCESSED.rglob("*")
                        if f.is_file() and not f.name.startswith("."))
    data_files.append(TRAIN_SPLIT)
    if not no_weights(p.init_from):
        data_files.append(Path(p.init_from))
    return ck.fingerprint(params, data_files, ck.code_files() + code_files(task))


def bucket_widths(meta, task) -> tuple:
    """(train, val) numpy width per sample of lines prepared in width buckets, once the model
    is known to take every bucket's width."""
    from stages.lib.shards import load_widths

    odd = [w for w in meta["width_buckets"] if not task.dynamic_width
           or w % task.dynamic_width]
    if odd:
        raise StageError(f"prepare.width_buckets: {odd} " + (
            f"not a multiple of {task.dynamic_width}, the model's stride"
            if task.dynamic_width else f"but the {task.name} model takes one input width"))
    return load_widths("train"), load_widths("val")


def resume(run, fingerprint, rank, world) -> str:
    """Continue from models/checkpoints/last.pt when its fingerprint matches (every rank from
    the same one), else start fresh (rank 0 removes the stale checkpoints): which, and why."""
    from stages.lib import checkpoint as ck

    ckpt, message = ck.resumable(ck.LAST, fingerprint)
    if world > 1:
        ckpt, message = agree_on_checkpoint(ckpt, message, fingerprint, rank, world)
    if ckpt is not None:
        restore(run, ckpt)
        if ckpt.get("rank_partial"):  # same world size: it is in the fingerprint
            run["state"]["loss_sum"], run["state"]["seen"] = ckpt["rank_partial"][rank]
    elif rank == 0:
        for path in (ck.LAST, ck.BEST):
            path.unlink(missing_ok=True)
    return message


def checkpointer(run, p, fingerprint, rank, world):
    """fit's on_checkpoint: every rank's running loss of the epoch gathered (a resume restores
    its own), then rank 0 writes last.pt, and best.pt too on a new best epoch."""
    from stages.lib import checkpoint as ck

    def on_checkpoint(kind):
        partial = None
        if world > 1:  # each rank's running loss of the epoch: a resume restores its own
            import torch.distributed as dist

            partial = [None] * world
            dist.all_gather_object(partial, (run["state"]["loss_sum"], run["state"]["seen"]))
        if rank != 0:
            return
        state = {**checkpoint(run, p, fingerprint), "rank_partial": partial}
        if kind == "best":
            ck.save(ck.BEST, state)
        ck.save(ck.LAST, state)

    return on_checkpoint


def log_history(live, rec, metric) -> None:
    """One epoch of the tracked history (plots/train/)."""
    for key, name in (("train_loss", "train/loss"), ("val_loss", "val/loss"),
                      (f"val_{metric}", f"val/{metric}"), ("lr", "lr")):
        live.log_metric(name, rec[key])
    live.next_step()


def epoch_logger(p, run, record, live, perf_live, tb):
    """Rank 0's on_epoch: the history (dvclive, tracked), the epoch's seconds, speed and peak
    memory (dvclive under logs/, and the run record), TensorBoard when on, and one line."""
    metric = run["task"].val_metric

    def on_epoch(rec, perf):
        log_history(live, rec, metric)
        perf_live.step = rec["epoch"] - 1
        for key in ("epoch_seconds", "samples_per_s", "peak_memory_bytes"):
            perf_live.log_metric(key, perf[key])
        perf_live.next_step()
        record["epochs"].append(perf)
        if tb is not None:
            step = run["state"]["step"]
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


def fit_logged(p, run, data, record, fingerprint, device, rank, world) -> None:
    """fit, with checkpoints, and on rank 0 its logs: the history so far replayed into
    plots/train/ (opening a Live dir clears it, so it never has gaps or duplicate steps), then
    each epoch, and TensorBoard events with train.tensorboard."""

    tb = None
    if rank == 0 and p.tensorboard:  # untracked, for watching a running job; may lag a kill
        from torch.utils.tensorboard import SummaryWriter

        # purge_step drops the events a killed run wrote after the checkpoint it resumes
        tb = SummaryWriter(str(TENSORBOARD_DIR), purge_step=run["state"]["step"] + 1)
    on_checkpoint = checkpointer(run, p, fingerprint, rank, world)
    with contextlib.ExitStack() as stack:
        on_epoch = None
        if rank == 0:
            live = stack.enter_context(open_live(LIVE_DIR))
            perf_live = None
            if run["state"]["epoch"] < p.epochs:  # keep the timings of the last run
                perf_live = stack.enter_context(open_live(PERF_LIVE_DIR))
            on_epoch = epoch_logger(p, run, record, live, perf_live, tb)
            for rec in run["state"]["history"]:
                log_history(live, rec, run["task"].val_metric)
        fit_or_fail(p, run, data, record, on_epoch, on_checkpoint, tb, device, rank, world)
    if tb is not None:
        tb.close()


def fit_or_fail(p, run, data, record, on_epoch, on_checkpoint, tb, device, rank, world):
    """fit; a non-finite loss or gradient, an interrupt (Ctrl-C) or running out of memory is
    written to the run record (rank 0) and stops the stage with a message naming the fix."""
    import torch

    from stages.lib import checkpoint as ck
    from stages.lib.provenance import write_run_record

    def on_step(step, loss, lr):
        tb.add_scalar("train/loss", loss, step)
        tb.add_scalar("lr", lr, step)

    try:
        fit(p, run, data, on_epoch, on_checkpoint, device, rank, world,
            on_step if tb is not None else None)
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
        st = run["state"]
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


def trained_on(p, device) -> dict:
    """What the weights were computed with, for model.pt's metadata (then the ONNX metadata and
    the report) and the run record: the device ("cpu" on every CPU, whatever its kind: the
    kernel profile says which kernels ran; the GPU's name on CUDA), deterministic algorithms
    on or off, and the precision."""
    import torch

    name = "cpu" if device == "cpu" else torch.cuda.get_device_name(device)
    return {"device": name, "deterministic": bool(p.deterministic), "precision": p.precision}


def first_step_check(p, run, data, device, rank, world) -> str:
    """On CUDA with train.deterministic: one train batch (forward, loss, backward) and one
    validation batch run before any step, their effects undone (stages/lib/determinism.py),
    so an op without a deterministic CUDA kernel stops the stage with one line that names it
    and the fix. "" when every op has one, and on the CPU (every CPU op is deterministic)."""
    import torch

    from stages.lib.determinism import preflight

    if device == "cpu" or not p.deterministic or run["state"]["epoch"] >= p.epochs:
        return ""
    x_train, y_train, x_val, y_val = data
    ds = epoch_batches(p, run, x_train, y_train, run["state"]["epoch"], rank, world)
    idx = torch.arange(min(2, len(x_val)))
    widths = run["widths"][1][:len(idx)] if run.get("widths") is not None else None

    def step():
        run["model"].train()
        _, xb, yb = ds[0]
        batch_backward(p, run, xb, yb, device)

    def validate():
        evaluate_loss(run["model"], x_val[idx], y_val[idx], run["task"], device=device,
                      widths=widths)

    return preflight(step, validate, run["model"], run["task"].name, p.model, device)


def write_outputs(p, run, meta, record, x_val, device) -> None:
    """Rank 0's outs: models/model.pt (the last epoch's weights, or best.pt's with train.keep:
    best; LoRA adapters merged), metrics/train.json and the finished run record."""
    from stages.lib import checkpoint as ck
    from stages.lib import finetune
    from stages.lib.models import save_model
    from stages.lib.provenance import write_run_record

    task = run["task"]
    if p.keep == "best":  # best.pt's weights (the last epoch's when it was the best)
        saved, why = ck.load(ck.BEST)
        if saved is None:
            raise StageError(f"train.keep is best but {why}; re-run `dvc repro`.")
        finetune.restore_state(getattr(run["model"], "module", run["model"]),
                               saved["model"], p)
        if run["ema"] is not None:
            run["ema"].load_state_dict(saved["ema"])
    if run["ema"] is not None:  # train.ema: the average becomes model.pt
        run["ema"].copy_to(run["model"])
    # LoRA: the adapters merged into plain weights; checked on a validation batch
    probe = x_val[0:min(len(x_val), 64)].to(device) if p.adapter != "none" else None
    model, merge_diff = finetune.merged(run["model"], p, probe)
    keys = (*task.meta_keys, "image_size", "channels", "mean", "std",
            *(["letterbox"] if "letterbox" in meta else []))  # prepare.letterbox
    buckets = {"width_buckets": meta["width_buckets"]} if meta.get("width_buckets") else {}
    save_model(MODEL, model, {**{k: meta[k] for k in keys}, "model": p.model,
                              "task": task.name, **buckets,
                              "kernels": record["kernels"]["kernels"],
                              "trained_on": run["trained_on"]})
    write_json(METRICS, train_metrics(p, run, merge_diff))
    history, best = run["state"]["history"], run["state"]["best"]
    last, metric = history[-1], f"val_{task.val_metric}"
    write_run_record("train", {**record, "status": "ok", "metrics": last,
                               "peak_memory_bytes": peak_memory_bytes(device),
                               "init": run["facts"].get("init")})
    kept = (f"the best epoch, {best['epoch']}: val {task.val_metric} "
            f"{history[best['epoch'] - 1][metric]:.4f}" if p.keep == "best"
            else f"the last epoch, {len(history)}: val {task.val_metric} {last[metric]:.4f}")
    click.echo(f"train: {kept} -> {MODEL} (train.keep: {p.keep})")


def train_metrics(p, run, merge_diff) -> dict:
    """metrics/train.json: the last epoch's losses and metric and the best epoch; with
    fine-tuning, what trained and what was loaded."""
    from stages.lib import finetune

    history, best = run["state"]["history"], run["state"]["best"]
    last, metric = history[-1], f"val_{run['task'].val_metric}"
    metrics = {"epochs": len(history), "train_loss": last["train_loss"],
               "val_loss": last["val_loss"], metric: last[metric], "best_epoch": best["epoch"],
               **({"kept": "best"} if p.keep == "best" else {})}
    facts = run["facts"]
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
    from stages.tasks import current

    task = current(params_path)  # first: params that do not fit the task stop here
    p = load("train", params_path)
    if (p.nproc > 1 or p.nnodes > 1) and "LOCAL_RANK" not in os.environ:
        relaunch_under_torchrun(p, params_path)
        return
    from stages.lib.kernels import use

    kernels = use(p.kernels, p.threads, click.echo)  # before torch loads: it picks the kernels
    import torch

    from stages.lib import hooks
    from stages.lib.provenance import run_record, write_run_record
    from stages.lib.shards import load_split

    p, cores, device, rank, world = start_process(p)
    # views over the memory-mapped shards: a batch is read and normalised when it is drawn
    x_train, y_train, meta = load_split("train", torch=True)
    x_val, y_val, _ = load_split("val", torch=True)
    if hooks.value("POISON"):
        x_train.poisoned.add(sample_paths().index(hooks.value("POISON")))
    fingerprint = run_fingerprint(p, task, cores)
    run = setup(p, meta, task, device)
    if meta.get("width_buckets"):  # lines in width buckets: batches and validation per bucket
        run["widths"] = bucket_widths(meta, task)
    message = resume(run, fingerprint, rank, world)
    click.echo(f"train: {message}")
    run["trained_on"] = trained_on(p, device)
    record = {**run_record("train", p), "world_size": world, **cores, "kernels": kernels,
              "device_name": device, "trained_on": run["trained_on"],
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

        run["model"] = DistributedDataParallel(run["model"])
    fit_logged(p, run, (x_train, y_train, x_val, y_val), record, fingerprint, device, rank,
               world)
    if rank == 0:
        write_outputs(p, run, meta, record, x_val, device)
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()


if __name__ == "__main__":
    main()
