"""The model.pt format shared by train, evaluate, export and the tools, and weight loading.

A task builds its model (Task.build_model); this module saves and loads it, runs it, and loads
fine-tuning weights into it. torch is imported inside the functions so `--help` stays instant.
"""
import io

def save_model(path, model, meta: dict) -> None:
    """model.pt: the weights plus everything needed to rebuild and feed the model.

    meta["task"] is dropped when it is the default task: files written before tasks existed are
    classification models, so they load unchanged, and a classifier's model.pt keeps its bytes.
    """
    import torch

    from stages.lib.io import write_bytes
    from stages.lib.params import DEFAULT_TASK

    if meta.get("task") == DEFAULT_TASK:
        meta = {k: v for k, v in meta.items() if k != "task"}

    buf = io.BytesIO()
    torch.save({"meta": meta, "state_dict": model.state_dict()}, buf)
    write_bytes(path, buf.getvalue())


def load_model(path):
    """Return (model in eval mode, meta) from a model.pt written by save_model."""
    import torch

    from stages.lib.io import StageError

    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise StageError(
            f"{path} not found: run the train stage first (`dvc repro train`).") from None
    from stages.lib.params import DEFAULT_TASK
    from stages.tasks import get

    meta = blob["meta"]
    model = get(meta.get("task", DEFAULT_TASK)).build_model(meta["model"], meta)
    model.load_state_dict(blob["state_dict"])
    return model.eval(), meta


def predict_logits(model, x, batch_size: int = 256):
    """float32 numpy logits of model on a normalised numpy batch, in eval mode, no grad."""
    import numpy as np
    import torch

    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            out.append(model(torch.from_numpy(x[i:i + batch_size])).numpy())
    return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)


def head_name(model) -> str:
    """Name prefix of the classification head: the last nn.Linear of the model."""
    from torch import nn

    names = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    return names[-1]


def init_from(model, path, freeze_backbone: bool = False) -> list[str]:
    """Load weights for fine-tuning from a model.pt, a training checkpoint or a bare state dict.

    A head whose shape differs (another class count) keeps its fresh initialisation; any other
    mismatch is an error naming the param. With freeze_backbone only the head stays trainable.
    Returns the names of the parameters that were not loaded.
    """
    from pathlib import Path

    import torch

    from stages.lib.io import StageError

    if not Path(path).is_file():
        raise StageError(f"train.init_from: {path} not found; give a local weights file or a "
                         f"previous run's models/model.pt (nothing is downloaded).")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise StageError(
            f"train.init_from: {path} is not a PyTorch weights file ({exc}).") from None
    state = blob.get("state_dict", blob.get("model", blob)) if isinstance(blob, dict) else None
    if not isinstance(state, dict):
        raise StageError(f"train.init_from: {path} holds no state dict.")
    own = model.state_dict()
    head = head_name(model) + "."
    skipped = sorted(k for k in own if k not in state or state[k].shape != own[k].shape)
    foreign = [k for k in skipped if not k.startswith(head)]
    if foreign:
        raise StageError(f"train.init_from: {path} does not fit train.model (e.g. "
                         f"{', '.join(foreign[:3])}); use weights of the same architecture.")
    model.load_state_dict({k: v for k, v in state.items() if k in own and k not in skipped},
                          strict=False)
    if freeze_backbone:
        for name, param in model.named_parameters():
            param.requires_grad_(name.startswith(head))
    return skipped
