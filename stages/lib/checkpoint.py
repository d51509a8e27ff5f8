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
"""
import io
from pathlib import Path

CHECKPOINT_DIR = Path("models/checkpoints")
LAST = CHECKPOINT_DIR / "last.pt"
BEST = CHECKPOINT_DIR / "best.pt"

# train params that cannot change the weights: a run may resume with another value
RESULT_NEUTRAL = ("num_workers", "checkpoint_every_steps", "rdzv_endpoint")


def code_files() -> list[Path]:
    """The source files whose change invalidates a checkpoint."""
    here = Path(__file__).resolve().parent
    return [here.parent / "train.py", here / "models.py", here / "augment.py",
            here / "checkpoint.py", *sorted((here / "modality").glob("*.py")),
            here / "finetune.py"]


def fingerprint(params: dict, data_files, code=None) -> dict:
    """{"params", "data", "code", "torch"}: plain values, comparable across runs."""
    import hashlib

    import torch

    from stages.lib.io import sha256_file

    code_hash = hashlib.sha256()
    for path in code if code is not None else code_files():
        code_hash.update(Path(path).read_bytes())
    return {
        "params": {k: v for k, v in sorted(params.items()) if k not in RESULT_NEUTRAL},
        "data": {str(f): sha256_file(f) for f in sorted(map(Path, data_files))},
        "code": code_hash.hexdigest(),
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
