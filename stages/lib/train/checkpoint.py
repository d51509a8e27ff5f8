"""Training checkpoints: atomic save, load, and the fingerprint that decides whether to resume.

A checkpoint is one dict (model, optimizer, scheduler, GradScaler, position, RNG state, history,
resolved params, fingerprint) saved with torch.save and written by stages.lib.io.write_bytes:
temp file in the same folder, fsync, os.replace. A kill at any instant leaves either the old
or the new file, never a torn one.

The fingerprint names what the result depends on: the train params (except those that cannot
change it), the sha256 of every data file, the sha256 of the training code and the torch
version. A checkpoint is resumed only when its fingerprint equals the current one; DVC keeps a
`persist: true` out across param changes, so this is what stops a new experiment from silently
continuing an old one.

The train stage's side of it is here too: what a checkpoint holds of a run (`checkpoint`) and
how a run takes it back (`restore`), the run's fingerprint (`run_fingerprint`), the resume
decision, every rank agreeing on one checkpoint under torchrun, and the writer fit calls
(`checkpointer`).
"""
import io
from pathlib import Path

CHECKPOINT_DIR = Path("models/checkpoints")
LAST = CHECKPOINT_DIR / "last.pt"
BEST = CHECKPOINT_DIR / "best.pt"

PROCESSED = Path("data/processed")
TRAIN_SPLIT = Path("data/split/train.csv")

# train params that cannot change the weights: a run may resume with another value
RESULT_NEUTRAL = ("num_workers", "checkpoint_every_steps", "rdzv_endpoint", "sync_every",
                  "device_data_share")

# train params that never change the training itself: left out of the checkpoint and of the
# resume fingerprint (train.keep only picks which weights become model.pt; the device is in
# the run record, logs/train.json's device_name)
NOT_RESUME_PARAMS = ("keep", "device")


def fingerprint(params: dict, data_files, code: str) -> dict:
    """{"params", "data", "code", "torch"}: plain values, comparable across runs. code: a hash
    of the training code (stages.lib.codedeps.code_hash of the train stage and its task)."""
    import torch

    from stages.lib.io import sha256_file

    return {
        "params": {k: v for k, v in sorted(params.items()) if k not in RESULT_NEUTRAL},
        "data": {str(f): sha256_file(f) for f in sorted(map(Path, data_files))},
        "code": code,
        "torch": str(torch.__version__),
    }


def mismatch(saved: dict, current: dict) -> str:
    """Why a checkpoint with fingerprint `saved` cannot be resumed now; "" when it can."""
    reasons = []
    old, new = saved.get("params", {}), current["params"]
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            reasons.append(f"train.{key} changed ({old.get(key)!r} -> {new.get(key)!r})")
    old, new = saved.get("data", {}), current["data"]
    changed = sorted(f for f in set(old) | set(new) if old.get(f) != new.get(f))
    if changed:
        reasons.append(f"the data changed ({', '.join(changed)})")
    if saved.get("code") != current["code"]:
        reasons.append("the training code changed")
    if saved.get("torch") != current["torch"]:
        reasons.append(f"torch changed ({saved.get('torch')} -> {current['torch']})")
    return "; ".join(reasons)


def save(path, state: dict) -> None:
    import torch

    from stages.lib.io import write_bytes

    buf = io.BytesIO()
    torch.save(state, buf)
    write_bytes(path, buf.getvalue())


def load(path):
    """(checkpoint dict, "") or (None, why it cannot be used)."""
    import torch

    path = Path(path)
    if not path.exists():
        return None, f"no checkpoint at {path}"
    try:
        return torch.load(path, map_location="cpu", weights_only=True), ""
    except Exception as exc:  # a truncated or foreign file: start fresh, say why
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, f"{path} cannot be read ({type(exc).__name__}: {first})"


def resumable(path, current: dict):
    """(checkpoint, message): the checkpoint when its fingerprint matches, else None and why."""
    ckpt, why = load(path)
    if ckpt is None:
        return None, f"starting fresh: {why}"
    why = mismatch(ckpt.get("fingerprint", {}), current)
    if why:
        return None, f"starting fresh, not resuming {path}: {why}"
    return ckpt, (f"resuming from {path} after {ckpt['epoch']} epoch(s) + {ckpt['batch']} "
                  f"batch(es), step {ckpt['step']} (fingerprint matches)")


def resume_params(p) -> dict:
    import dataclasses

    from stages.lib.params import without_placement

    # a modality key at its default is fingerprinted as before it existed
    return {k: v for k, v in without_placement("train", dataclasses.asdict(p)).items()
            if k not in NOT_RESUME_PARAMS}


def run_fingerprint(p, task, cores) -> dict:
    """What a checkpoint must match to be resumed: the params that change training, the data
    (data/processed/, the train split, train.init_from's file) and the code: every project file
    the train stage reaches for the task, read from its imports (stages.lib.codedeps)."""
    from stages.lib.codedeps import code_hash
    from stages.lib.model.models import no_weights

    # the thread count orders CPU float sums: the effective one, not train.threads' 0 (auto)
    params = {**resume_params(p), "task": task.name, "threads": cores["threads"]}
    # hidden files are other writers' temp files, not data
    data_files = sorted(f for f in PROCESSED.rglob("*")
                        if f.is_file() and not f.name.startswith("."))
    data_files.append(TRAIN_SPLIT)
    if not no_weights(p.init_from):
        data_files.append(Path(p.init_from))
    return fingerprint(params, data_files, code_hash("train", task.name))


def checkpoint(run, p, fingerprint) -> dict:
    """Everything needed to continue exactly where run (stages/lib/train/loop.py Run) is now."""

    import torch

    from stages.lib.train.finetune import checkpoint_state

    model = getattr(run.model, "module", run.model)  # unwrap DDP
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return {**run.state, "model": checkpoint_state(model, p),
            "optimizer": run.opt.state_dict(),
            "scheduler": run.sched.state_dict(), "scaler": run.scaler.state_dict(),
            "ema": run.ema.state_dict() if run.ema else None, "rng": rng,
            "params": resume_params(p), "fingerprint": fingerprint}


def restore(run, ckpt) -> None:
    """run (stages/lib/train/loop.py Run) put back where checkpoint ckpt was taken."""
    import torch

    from stages.lib.train.finetune import restore_state

    restore_state(getattr(run.model, "module", run.model), ckpt["model"], run.p)
    run.opt.load_state_dict(ckpt["optimizer"])
    run.sched.load_state_dict(ckpt["scheduler"])
    run.scaler.load_state_dict(ckpt["scaler"])
    if run.ema is not None:  # the fingerprint holds train.ema: the checkpoint has one
        run.ema.load_state_dict(ckpt["ema"])
    torch.set_rng_state(ckpt["rng"]["torch"])
    if "cuda" in ckpt["rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(ckpt["rng"]["cuda"])
    run.state = {k: ckpt[k] for k in run.state}


def agree_on_checkpoint(ckpt, message, fingerprint, rank, world):
    """Every rank resumes from the same state. Only global rank 0 writes last.pt, and on
    several machines torchrun may give rank 0 to another machine after a restart, so each rank
    offers the checkpoint it can resume and the most advanced one (lowest rank on a tie) is
    sent to all. Ranks whose data, code or params differ from rank 0's stop, naming why."""
    import torch.distributed as dist

    from stages.lib.io import StageError

    offers = [None] * world
    dist.all_gather_object(offers, (fingerprint, ckpt["step"] if ckpt is not None else -1))
    for other, (theirs, _) in enumerate(offers):
        why = mismatch(offers[0][0], theirs)
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


def resume(run, fingerprint, rank, world) -> str:
    """Continue from models/checkpoints/last.pt when its fingerprint matches (every rank from
    the same one), else start fresh (rank 0 removes the stale checkpoints): which, and why."""
    ckpt, message = resumable(LAST, fingerprint)
    if world > 1:
        ckpt, message = agree_on_checkpoint(ckpt, message, fingerprint, rank, world)
    if ckpt is not None:
        restore(run, ckpt)
        if ckpt.get("rank_partial"):  # same world size: it is in the fingerprint
            run.state["loss_sum"], run.state["seen"] = ckpt["rank_partial"][rank]
    elif rank == 0:
        for path in (LAST, BEST):
            path.unlink(missing_ok=True)
    return message


def checkpointer(run, p, fingerprint, rank, world):
    """fit's on_checkpoint: every rank's running loss of the epoch gathered (a resume restores
    its own), then rank 0 writes last.pt, and best.pt too on a new best epoch."""
    from stages.lib.train.distributed import gather

    def on_checkpoint(kind):
        # each rank's running loss of the epoch (None with one process): a resume restores its own
        partial = gather((run.state["loss_sum"], run.state["seen"]), world)
        if rank != 0:
            return
        state = {**checkpoint(run, p, fingerprint), "rank_partial": partial}
        if kind == "best":
            save(BEST, state)
        save(LAST, state)

    return on_checkpoint
