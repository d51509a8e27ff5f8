"""The training loop the train stage runs for every task: set-up, epochs, steps, validation.

A `Run` holds one training's live objects (model, optimiser, schedule, GradScaler, EMA, the
task) and its position, `state`: {epoch, batch, step, loss_sum, seen, history, best}, the plain
dict a checkpoint saves (stages/lib/train/checkpoint.py). `fit` trains from that position to
train.epochs. The task (stages/tasks/) gives the model, the loss (run through
models.forward_loss) and the validation sums (`val_sums`); everything else here is the
same for every task.

Randomness is a pure function of (seed, epoch, sample index) (stages/lib/train/augment.py), so a
resumed run ends with the same bytes as one that never stopped. The first non-finite loss or
gradient raises NonFinite before the step. Under DDP every rank runs the same steps and stops
together (stages/lib/train/distributed.py reduce).

torch is imported inside the functions: a stage's --help never loads it.
"""
import contextlib
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from stages.lib.train import ema
from stages.lib.io import StageError


@dataclass
class Run:
    """One training's live objects and its position (`state`, what a checkpoint saves).

    widths: with prepare.width_buckets, the (train, val) numpy bucket width of each sample;
    trained_on: what the weights are computed with (stages/lib/train/distributed.py trained_on)."""
    p: Any  # the train params (stages/lib/params.py Train)
    task: Any  # the task (stages/tasks/base.py Task)
    model: Any  # the model; wrapped in DistributedDataParallel under torchrun
    opt: Any
    sched: Any
    scaler: Any  # torch.amp.GradScaler, enabled with train.precision fp16
    ema: Any  # stages/lib/train/ema.py EMA, or None without train.ema
    facts: dict  # what fine-tuning trained and loaded (stages/lib/train/finetune.py setup_model)
    eval_modules: Any  # modules kept in eval mode while training (frozen BatchNorm)
    state: dict
    widths: tuple | None = None
    trained_on: dict | None = None
    source: Any = None  # stages/lib/train/devicedata.py Source: batches built on the device


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
        # runs MKL's VML and gives other last bits on Intel than on AMD
        # (stages/lib/train/kernels.py)
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


def setup(p, meta, task, device="cpu") -> Run:
    """Fresh training state: seeded model (optionally from train.init_from, with frozen parts
    or LoRA adapters: stages/lib/train/finetune.py), optimizer, per-epoch LR schedule, GradScaler
    and the position {epoch, batch, step, ...}."""
    import torch

    from stages.lib.train import finetune

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
    return Run(model=model, opt=opt, sched=sched, scaler=scaler, state=state, task=task, p=p,
               facts=facts, eval_modules=eval_modules, ema=ema.build(model, p))


def bucket_widths(meta, task) -> tuple:
    """(train, val) numpy width per sample of lines prepared in width buckets, once the model
    is known to take every bucket's width."""
    from stages.lib.data.shards import load_widths

    odd = [w for w in meta["width_buckets"] if not task.dynamic_width
           or w % task.dynamic_width]
    if odd:
        raise StageError(f"prepare.width_buckets: {odd} " + (
            f"not a multiple of {task.dynamic_width}, the model's stride"
            if task.dynamic_width else f"but the {task.name} model takes one input width"))
    return load_widths("train"), load_widths("val")


class NonFinite(Exception):
    """A non-finite loss or gradient: .info holds epoch, step and the batch's sample indices."""

    def __init__(self, info):
        super().__init__(info["what"])
        self.info = info


def fit(p, run: Run, data, on_epoch=None, on_checkpoint=None, device="cpu", rank=0, world=1,
        on_step=None) -> Run:
    """Train from run.state's position to train.epochs.

    data = (x_train, y_train, x_val, y_val): tensors, or the indexable views of
    stages/lib/data/shards.py (torch=True), which read and normalise a batch when it is drawn;
    run.widths (optional; prepare.width_buckets): (train, val) numpy bucket widths per
    sample: each batch holds one bucket, cut to its width (stages/lib/train/augment.py
    bucket_batches), and validation runs each bucket at its width;
    on_epoch(record, perf) after each epoch;
    on_checkpoint(kind) where kind is "step" (every train.checkpoint_every_steps steps) or
    "epoch"; on_step(step, loss, lr) after each optimiser step. Raises NonFinite on the first
    non-finite loss or gradient (before the step).
    """
    from stages.lib.train.distributed import peak_memory_bytes

    x_train, y_train, x_val, y_val = data
    trainable = [q for q in run.model.parameters() if q.requires_grad]
    if run.source is None and run.state["epoch"] < p.epochs:
        from stages.lib.train.devicedata import Source, use_device_batches

        if use_device_batches(p, device):  # train.device_batches
            run.source = Source(x_train, y_train, device, p.device_data_share,
                                run.task.modality)
            print(f"train: batches built on {device}: {run.source.describe()}",
                  file=sys.stderr, flush=True)
    while run.state["epoch"] < p.epochs:
        epoch = run.state["epoch"]
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


def epoch_batches(p, run: Run, x_train, y_train, epoch: int, rank: int, world: int):
    """This rank's batches of the epoch (stages/lib/train/augment.py EpochBatches): the epoch's
    seeded order, padded and split over the ranks; with width buckets, one bucket per batch."""
    import torch

    from stages.lib.train.augment import EpochBatches, bucket_batches, epoch_order

    per_rank = p.batch_size // world
    if run.widths is not None:  # prepare.width_buckets: one bucket per batch
        plan = bucket_batches(len(x_train), run.widths[0], p.batch_size, p.seed, epoch,
                              rank, world)
        return EpochBatches(x_train, y_train, None, per_rank, p, epoch, run.task, plan)
    order = epoch_order(len(x_train), p.seed, epoch)
    if world > 1:  # pad like DistributedSampler: every rank runs the same steps
        order = torch.cat([order, order[:(-len(order)) % world]])[rank::world]
    return EpochBatches(x_train, y_train, order, per_rank, p, epoch, run.task)


def train_epoch(p, run: Run, ds, trainable, device, world, on_step, on_checkpoint) -> tuple:
    """The epoch's batches from run.state's batch on, an optimiser step every
    train.grad_accum_steps of them (and at the last): (seconds spent, not counting
    checkpoint writes, and samples this rank saw). Uses run.model, run.state, run.ema,
    run.opt (its learning rate, for on_step) and run.eval_modules, and through
    batch_backward and optimizer_step run.task, run.scaler and run.opt.

    No host sync per step: each batch's loss (and each step's gradient check) stays on the
    device in `pending` and is read every train.sync_every batches, before a checkpoint and at
    the epoch's end (Pending.flush): the loss sums, on_step and the non-finite check then run
    over those batches in order, so the logged figures are those of a per-step read and a
    NaN names the first batch that produced it. Steps after it have run on poisoned weights,
    but only in memory: last.pt is written after a flush, so it keeps the last good state."""
    from tqdm import tqdm

    from stages.lib import hooks
    from stages.lib.train.augment import batches

    st, epoch = run.state, run.state["epoch"]
    run.model.train()
    for module in run.eval_modules:  # frozen BatchNorm (train.lora_batchnorm)
        module.eval()
    kill_at = int(hooks.value("KILL_AT_STEP") or 0)
    interrupt_at = int(hooks.value("INTERRUPT_AT_STEP") or 0)
    start, window, seconds, seen = st["batch"], [], 0.0, 0
    tic = time.perf_counter()
    source = (run.source.batches(ds, start, run.task, p, epoch) if run.source is not None
              else batches(ds, start, p.num_workers))
    bar = tqdm(source, total=len(ds) - start, disable=None,
               desc=f"epoch {epoch + 1}/{p.epochs}", unit="batch", leave=False)
    pending = Pending(run, world, device, on_step, bar)
    for b, (idx, xb, yb) in enumerate(bar, start):
        window.append(idx)
        loss = batch_backward(p, run, xb, yb, device)
        pending.watch(loss)
        last = b + 1 == len(ds)
        where = {"epoch": epoch, "batch": b, "step": st["step"] + 1}
        seen += len(idx)
        if not (last or (b + 1) % p.grad_accum_steps == 0):
            pending.add(loss, len(idx), where, [idx])
            if len(pending) >= p.sync_every:
                pending.flush()
            continue
        check = grad_check(p, run, trainable)
        pending.add(loss, len(idx), where, [idx], check, window,
                    (st["step"] + 1, run.opt.param_groups[0]["lr"]))
        optimizer_step(p, run, check, pending)
        st["step"] += 1
        if run.ema is not None:
            run.ema.update(run.model, st["step"])
        st["batch"] = b + 1
        window = []
        crash_hooks(st["step"], kill_at, interrupt_at)
        if len(pending) >= p.sync_every:
            pending.flush()
        if on_checkpoint and p.checkpoint_every_steps and not last \
                and st["step"] % p.checkpoint_every_steps == 0:
            pending.flush()  # a checkpoint holds only figures that were read and checked
            seconds += time.perf_counter() - tic
            on_checkpoint("step")
            tic = time.perf_counter()
    pending.flush()
    return seconds + time.perf_counter() - tic, seen


# devices where a value read back costs no wait: the non-finite check runs on the host at each
# step there (tests empty it to run the device latch on the CPU)
HOST_CHECK_DEVICES = ("cpu",)


class Pending:
    """Batches trained but not yet read back: each one's loss (a 0-d device tensor) and, at an
    optimiser step, the gradient check's value (norm or sum; None under fp16), kept on the
    device until flush() reads them all in one transfer (one host sync), then adds the losses
    to run.state in batch order, calls on_step for each step and raises NonFinite at the first
    non-finite loss or gradient (under DDP: on any rank; one all_reduce per flush).

    `bad` is a device flag (0-d float32) set by the first non-finite loss or gradient and never
    cleared: AdamW (fused) skips every step while it is set (its found_inf, as a GradScaler
    uses it), so the weights stay those of the last good step with no host sync. SGD has no
    such input: with it the flag is read at each step (one sync a step). On the CPU
    (HOST_CHECK_DEVICES) reading a value back waits for nothing: there `bad` is a host bool
    checked at each step, as cheap as before, with no latch ops and no found_inf."""

    def __init__(self, run, world, device, on_step, bar=None):
        self.run, self.world, self.device, self.on_step, self.bar = run, world, device, on_step, bar
        self.items = []
        self.host = str(device).split(":")[0] in HOST_CHECK_DEVICES
        self.bad = False if self.host else None

    def watch(self, value) -> None:
        """Latch `bad` when value (a 0-d tensor: a loss, a gradient norm) is not finite: on
        the value's device, no sync (on the CPU, read on the host)."""
        import torch

        if self.host:
            self.bad = self.bad or not math.isfinite(value.item())
            return
        now = (~torch.isfinite(value.detach())).float()
        self.bad = now if self.bad is None else torch.maximum(self.bad, now)

    def __len__(self):
        return len(self.items)

    def add(self, loss, n, where, batch, check=None, window=None, step=None):
        self.items.append((loss, n, where, batch, check, window, step))

    def any_bad(self) -> bool:
        """Whether `bad` is set on any rank (a host sync; one all_reduce under DDP, so every
        rank flushes, and stops, together)."""
        from stages.lib.train.distributed import reduce

        flag = float(self.bad) if self.host else float(self.bad.item())
        return bool(reduce([flag], self.world, self.device, "max")[0])

    def flush(self) -> None:
        if not self.items:
            return
        import torch

        from stages.lib.train.distributed import reduce

        items, self.items = self.items, []
        values = [loss.detach().double().reshape(1) for loss, *_ in items]
        checks = [(c[0].detach().double().reshape(1) if c is not None else
                   values[i].new_zeros(1)) for i, (_, _, _, _, c, _, _) in enumerate(items)]
        read = torch.cat(values + checks).tolist()  # the one host sync
        losses, norms = read[:len(items)], read[len(items):]
        bad = []
        for (_, _, _, _, check, _, _), value, norm in zip(items, losses, norms, strict=True):
            bad += [not math.isfinite(value), check is not None and not math.isfinite(norm)]
        bad = [bool(x) for x in reduce(bad, self.world, self.device, "max")]
        st = self.run.state
        for k, (_, n, where, batch, check, window, step) in enumerate(items):
            value, norm = losses[k], norms[k]
            if bad[2 * k] or bad[2 * k + 1]:  # the position of the last good step
                st["step"] = where["step"] - 1
            if bad[2 * k]:
                raise NonFinite({"what": f"loss {value}", **where, "indices": batch})
            if bad[2 * k + 1]:
                raise NonFinite({"what": f"gradient {check[1]} {norm}", **where,
                                 "indices": window})
            st["loss_sum"] += value * n
            st["seen"] += n
            if step is not None and self.on_step:
                self.on_step(step[0], value, step[1])
        if self.bar is not None and getattr(self.bar, "disable", True) is False:
            self.bar.set_postfix(loss=f"{losses[-1]:.4f}", refresh=False)


def batch_backward(p, run: Run, xb, yb, device):
    """One batch's forward and the task's loss (under autocast with train.precision bf16 or
    fp16), and its backward, scaled for gradient accumulation (and by the GradScaler with
    fp16): the loss, a detached 0-d tensor on the device (read back by Pending.flush, never
    here: no host sync per step)."""
    import torch

    from stages.lib.model.models import forward_loss

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(p.precision)
    xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
    autocast = torch.autocast(torch.device(device).type, dtype=dtype) if dtype \
        else contextlib.nullcontext()
    with autocast:
        loss = forward_loss(run.model, xb, yb, run.task.loss, p)
    scaled = loss if p.grad_accum_steps == 1 else loss / p.grad_accum_steps
    (run.scaler.scale(scaled) if p.precision == "fp16" else scaled).backward()
    return loss.detach()


def grad_check(p, run: Run, trainable):
    """Unscale (fp16), then clip (train.grad_clip) or sum the gradients: (the norm or sum, a
    0-d device tensor, "norm" or "sum") for the non-finite check, or None under fp16, whose
    GradScaler skips an overflowing step itself. Nothing is read back here."""
    import torch

    fp16 = p.precision == "fp16"
    if fp16:
        run.scaler.unscale_(run.opt)
    if p.grad_clip > 0:
        norm = torch.nn.utils.clip_grad_norm_(trainable, p.grad_clip)
        return None if fp16 else (norm, "norm")
    if fp16:
        return None
    # any nan or inf makes the sum non-finite; cheaper than a norm
    return torch.stack([q.grad.sum() for q in trainable if q.grad is not None]).sum(), "sum"


def optimizer_step(p, run: Run, check, pending) -> None:
    """Step (through the GradScaler with fp16), unless a loss or gradient since the run began
    was non-finite (pending.bad): that step and every later one are skipped on the device
    (AdamW's found_inf), and the next Pending.flush raises NonFinite naming the first bad
    batch; last.pt, written only after a flush, keeps the last good state."""
    opt, scaler = run.opt, run.scaler
    if check is None:  # fp16: the GradScaler skips a step whose gradients overflowed
        scaler.step(opt)
        scaler.update()
    else:
        pending.watch(check[0])
        if p.optimizer == "adamw" and not pending.host:  # skipped on the device while bad
            opt.found_inf = pending.bad
            try:
                opt.step()
            finally:
                del opt.found_inf
        else:  # SGD has no found_inf, the CPU needs none: read the flag, stop before the step
            if pending.any_bad():
                pending.flush()
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


def end_epoch(p, run: Run, x_val, y_val, device, world) -> tuple[dict, bool]:
    """Close the epoch: the LR schedule's step, the train loss over every rank, the validation
    loss and metric, the best epoch so far, and the position moved to the next epoch.
    (the epoch's history record, whether it is the best so far)"""
    import torch

    from stages.lib.train.distributed import reduce

    st, task = run.state, run.task
    epoch = st["epoch"]
    lr = run.opt.param_groups[0]["lr"]
    run.sched.step()
    # the train loss over every rank
    loss_sum, count = reduce([st["loss_sum"], st["seen"]], world, device, "sum", torch.float64)
    with ema.applied(run):  # train.ema: the average is what is validated (and kept)
        val_loss, val_metric = evaluate_loss(run.model, x_val, y_val, task, device=device,
                                             widths=(run.widths or (None, None))[1])
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


def first_step_check(p, run: Run, data, device, rank, world) -> str:
    """On CUDA with train.deterministic: one train batch (forward, loss, backward) and one
    validation batch run before any step, their effects undone (stages/lib/train/determinism.py),
    so an op without a deterministic CUDA kernel stops the stage with one line that names it
    and the fix. "" when every op has one, and on the CPU (every CPU op is deterministic)."""
    import torch

    from stages.lib.train.determinism import preflight

    if device == "cpu" or not p.deterministic or run.state["epoch"] >= p.epochs:
        return ""
    x_train, y_train, x_val, y_val = data
    ds = epoch_batches(p, run, x_train, y_train, run.state["epoch"], rank, world)
    idx = torch.arange(min(2, len(x_val)))
    widths = run.widths[1][:len(idx)] if run.widths is not None else None

    def step():
        run.model.train()
        _, xb, yb = ds[0]
        batch_backward(p, run, xb, yb, device)

    def validate():
        evaluate_loss(run.model, x_val[idx], y_val[idx], run.task, device=device,
                      widths=widths)

    return preflight(step, validate, run.model, run.task.name, p.model, device)
