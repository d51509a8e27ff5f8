"""The GPU recipe tools.init proposes on a machine with a GPU: the samples' recipes are sized
for two CPU cores (batch 16-64), which leaves a GPU idle most of each step. With a GPU, init
raises train.batch_size to fill a share of its free memory, scales train.lr linearly with it
(Goyal et al. 2017, "Accurate, large minibatch SGD") and lengthens train.warm-up to match, and
says why, as it does for the other fitted params. On the CPU nothing changes (and nothing here
imports torch unless a GPU driver is present).

`propose` is the pure rule (tests/test_gpu_recipe.py gives it a free-memory figure); `choices`
reads the GPU and the recipe.
"""
import math
import shutil
from pathlib import Path

SHARE = 0.6  # of the GPU's free memory the training's activations may take
MAX_BATCH = 1024
# bytes of activations (forward + backward, fp32) per input element of one sample: a
# conservative figure for the small CNNs of the samples (CenterNet 160 px: ~0.3 MB/sample
# measured, 77k elements: ~4 B each; 64 leaves headroom for wider models)
BYTES_PER_ELEMENT = 64


def gpu_present() -> bool:
    """A GPU driver on this machine (checked without importing torch)."""
    return Path("/proc/driver/nvidia").exists() or shutil.which("nvidia-smi") is not None


def propose(batch: int, lr: float, warmup: int, epochs: int, free_bytes: int,
            sample_bytes: int, n_train: int | None = None) -> list:
    """[(dotted key, value, why)] of the GPU recipe, [] when the recipe's batch already fills
    the share. The batch: the largest power of two whose activations (sample_bytes each) fit
    in SHARE of free_bytes, at most MAX_BATCH and at most an eighth of the train split (at
    least eight steps an epoch); lr times the batch's factor (linear scaling); warm-up
    lengthened by log2 of that factor (at least one epoch, always under train.epochs)."""
    fit = int(SHARE * free_bytes // max(1, sample_bytes))
    cap = min(fit, MAX_BATCH, n_train // 8 if n_train else MAX_BATCH)
    new = 2 ** int(math.log2(cap)) if cap >= 1 else 0
    if new <= batch:
        return []
    k = new // batch if new % batch == 0 else new / batch
    new_warmup = min(max(warmup, warmup + math.ceil(math.log2(new / batch))), max(epochs - 1, 0))
    gib = free_bytes / 2 ** 30
    out = [("train.batch_size", new,
            f"GPU recipe: fills {SHARE:.0%} of the GPU's {gib:.1f} GiB free at ~"
            f"{sample_bytes / 2 ** 20:.1f} MiB of activations a sample"
            + (f", at most an eighth of the {n_train} train images" if n_train else "")
            + f"; the CPU recipe's {batch} leaves a GPU idle"),
           ("train.lr", float(f"{lr * new / batch:.6g}"),
            f"GPU recipe: {lr} x {k} (linear scaling with the batch)")]
    if new_warmup != warmup:
        out.append(("train.warmup_epochs", new_warmup,
                    f"GPU recipe: {warmup} + log2({k}) epochs of warm-up for the larger lr"))
    return out


def sample_elements(values: dict) -> int:
    """Input elements of one sample from the prepare settings (auto sizes: 224 px, 3 channels;
    OCR lines: height x width)."""
    def num(key, default):
        v = values.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else default

    channels = num("prepare.channels", 3)
    if values.get("task") == "ocr":
        return channels * num("prepare.height", 32) * num("prepare.width", 160)
    side = num("prepare.image_size", 224)
    return channels * side * side


def choices(values: dict, n_train: int | None = None) -> list:
    """The GPU recipe for the effective params `values` ({dotted key: value}) on this
    machine's GPU, [] without one."""
    if not gpu_present():
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    free, _ = torch.cuda.mem_get_info()
    return propose(values["train.batch_size"], values["train.lr"],
                   values["train.warmup_epochs"], values["train.epochs"], free,
                   BYTES_PER_ELEMENT * sample_elements(values), n_train)
