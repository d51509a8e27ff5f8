"""The model.pt format shared by train, evaluate, export and the tools, and weight loading.

A task builds its model (Task.build_model); this module saves and reads it, runs it, and loads
fine-tuning weights into it (stages.tasks.load_model rebuilds a model.pt with its task). torch
is imported inside the functions so `--help` stays instant.
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

    state = model.state_dict()
    if any(v.device.type != "cpu" for v in state.values()):  # trained on a GPU: a file that
        moved = type(state)((k, v.cpu()) for k, v in state.items())  # loads on any machine
        moved._metadata = getattr(state, "_metadata", None)
        state = moved
    buf = io.BytesIO()
    torch.save({"meta": meta, "state_dict": state}, buf)
    write_bytes(path, buf.getvalue())


def read_model(path):
    """(state dict, meta) of a model.pt written by save_model. The task named in meta builds
    the model (stages.tasks.load_model): this floor knows no task."""
    import torch

    from stages.lib.io import StageError

    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise StageError(
            f"{path} not found: run the train stage first (`dvc repro train`).") from None
    return blob["state_dict"], blob["meta"]


def predict_outputs(model, x, batch_size: int = 256):
    """model's output as float32 numpy (a task's logits, boxes, masks or CTC frames) on a
    normalised numpy batch, batch_size samples at a time, in eval mode, no grad: a PyTorch
    model or a TorchScript module (stages.lib.model.formats.torchscript_module)."""
    import numpy as np
    import torch

    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            out.append(model(torch.from_numpy(x[i:i + batch_size])).numpy())
    return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)


def predict_bucketed(model, x, widths, task, batch_size: int = 256):
    """predict_outputs with each sample cut to its bucket width (prepare.width_buckets; widths:
    numpy, one per sample), as train and predict run it; the narrower buckets' outputs are
    padded to the widest's by task.pad_outputs. Buckets run in turn, their samples in order."""
    import numpy as np
    import torch

    model.eval()
    parts = {}
    with torch.no_grad():
        for width in sorted(set(widths.tolist())):
            members = np.flatnonzero(widths == width)
            for i in range(0, len(members), batch_size):
                idx = members[i:i + batch_size]
                xb = np.ascontiguousarray(x[idx][..., :width])
                parts[tuple(idx.tolist())] = model(torch.from_numpy(xb)).numpy()
    frames = max(o.shape[1] for o in parts.values())
    out = None
    for idx, o in parts.items():
        if o.shape[1] < frames:
            o = task.pad_outputs(o, frames)
        if out is None:
            out = np.empty((len(x), *o.shape[1:]), dtype=o.dtype)
        out[list(idx)] = o
    return out


def head_name(model) -> str:
    """Name prefix of the classification head: the last nn.Linear of the model."""
    from torch import nn

    names = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not names:
        from stages.lib.io import StageError

        raise StageError("fine-tuning needs the model's head: this model has no nn.Linear, so "
                         "its task must name the head module (Task.head).")
    return names[-1]


def no_weights(path) -> bool:
    """train.init_from / evaluate.compare_with naming no weights file (the placeholder)."""
    from stages.lib.params import NO_WEIGHTS

    return path in ("", NO_WEIGHTS)


def read_weights(path, knob="train.init_from"):
    """(state dict, kind) of a weights file: a model.pt of this pipeline, a training
    checkpoint (last.pt/best.pt), or a torchvision/timm-style state dict (bare, or under
    "state_dict"/"model", with DDP's "module." prefix or not)."""
    from pathlib import Path

    import torch

    from stages.lib.io import StageError

    if not Path(path).is_file():
        raise StageError(f"{knob}: {path} not found; give a local weights file or a previous "
                         f"run's models/model.pt (nothing is downloaded).")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise StageError(f"{knob}: {path} is not a PyTorch weights file ({exc}).") from None
    kind, state = "state dict", blob
    if isinstance(blob, dict) and "meta" in blob and "state_dict" in blob:
        kind, state = "model.pt", blob["state_dict"]
    elif isinstance(blob, dict) and "fingerprint" in blob and "model" in blob:
        kind, state = "checkpoint", blob["model"]
    elif isinstance(blob, dict) and isinstance(blob.get("state_dict", blob.get("model")), dict):
        state = blob.get("state_dict", blob.get("model"))
    if not isinstance(state, dict) or not state or not all(
            isinstance(v, torch.Tensor) for v in state.values()):
        raise StageError(f"{knob}: {path} holds no state dict (name -> tensor).")
    if any(".lora_" in k for k in state):
        raise StageError(f"{knob}: {path} is a LoRA training checkpoint (adapter weights only); "
                         f"start from that run's models/model.pt (adapter merged) instead.")
    if all(k.startswith("module.") for k in state):
        state = {k.removeprefix("module."): v for k, v in state.items()}
    return state, kind


def align_names(own, state: dict) -> dict:
    """state with its names moved under (or out of) one leading module name when that matches
    more of own's names: a torchvision resnet18's `conv1.weight` is `1.conv1.weight` in the
    grey-image wrapper (Sequential(RepeatChannels, net)), and back."""
    best, hits = state, len(own & state.keys())
    for pre in sorted({k.split(".", 1)[0] + "." for k in own if "." in k}):
        cand = {pre + k: v for k, v in state.items()}
        if len(own & cand.keys()) > hits:
            best, hits = cand, len(own & cand.keys())
    for pre in sorted({k.split(".", 1)[0] + "." for k in state if "." in k}):
        cand = {k[len(pre):]: v for k, v in state.items() if k.startswith(pre)}
        if len(own & cand.keys()) > hits:
            best, hits = cand, len(own & cand.keys())
    return best


def init_from(model, path, freeze_backbone: bool = False, strict: bool = False,
              head: str | None = None) -> dict:
    """Load weights for fine-tuning from a model.pt, a training checkpoint or a state dict.

    Returns the report {"from", "kind", "loaded", "reinitialised", "missing", "unexpected"}:
    tensor names, in the model's order (unexpected: the file's). A tensor whose shape differs
    (a head with another class count) keeps its fresh initialisation: re-initialised. Missing
    tensors keep theirs; unexpected ones are ignored. With strict, anything but a re-initialised
    head is an error; nothing loaded at all is always one. With freeze_backbone only the head
    (`head`, default the last nn.Linear) stays trainable.
    """
    from stages.lib.io import StageError

    state, kind = read_weights(path)
    own = model.state_dict()
    state = align_names(set(own), state)
    head = (head or head_name(model)) + "."
    loaded = [k for k in own if k in state and state[k].shape == own[k].shape]
    reinit = [k for k in own if k in state and state[k].shape != own[k].shape]
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    report = {"from": str(path), "kind": kind, "loaded": loaded, "reinitialised": reinit,
              "missing": missing, "unexpected": unexpected}
    if not loaded:
        raise StageError(f"train.init_from: {path} does not fit train.model: no tensor name and "
                         f"shape matches (e.g. {', '.join(list(state)[:3])}); use weights of "
                         f"the same architecture.")
    bad = [k for k in reinit if not k.startswith(head)] + missing + unexpected
    if strict and bad:
        raise StageError(
            f"train.init_from: {path} does not match train.model exactly and "
            f"train.init_strict is true: {describe_init(report)}. Set train.init_strict: "
            f"false to load what fits.")
    model.load_state_dict({k: state[k] for k in loaded}, strict=False)
    if freeze_backbone:
        for name, param in model.named_parameters():
            param.requires_grad_(name.startswith(head))
    return report


def describe_init(report: dict, limit: int = 8) -> str:
    """One line: how many tensors loaded, and the others by name."""
    def names(key):
        items = report[key]
        more = f", ... ({len(items) - limit} more)" if len(items) > limit else ""
        return f"{len(items)} {key.replace('reinitialised', 're-initialised')} " \
               f"({', '.join(items[:limit])}{more})" if items else ""

    parts = [f"{len(report['loaded'])} loaded"] + [names(k) for k in
                                                    ("reinitialised", "missing", "unexpected")]
    return ", ".join(x for x in parts if x)


def forward_loss(model, x, targets, loss, p):
    """One train step's forward and loss, as the shared loop calls it (under autocast; model may
    be DDP-wrapped). By default loss(model(x), targets, p), loss being the task's. A model that
    says it `takes_targets` (torchvision's detectors) is called with the targets instead, through
    DDP when wrapped, and returns a dict of losses: their sum."""
    if getattr(getattr(model, "module", model), "takes_targets", False):
        return sum(model(x, targets).values())
    return loss(model(x), targets, p)
