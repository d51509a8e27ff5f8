"""Model construction and the model.pt format shared by train, evaluate and export.

torch is imported inside the functions so that `--help` of every stage stays instant.
"""
import io

SMALL_CNN = "small_cnn"


def build_model(name: str, num_classes: int, channels: int):
    from torch import nn

    if name == SMALL_CNN:
        def block(cin, cout):
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

        return nn.Sequential(
            *block(channels, 32), nn.MaxPool2d(2),
            *block(32, 64), nn.MaxPool2d(2),
            *block(64, 128),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, num_classes),
        )
    import torchvision

    if name not in torchvision.models.list_models():
        from stages.lib.io import StageError

        raise StageError(
            f"train.model: unknown model {name!r}; use {SMALL_CNN!r} or a torchvision name "
            f"such as resnet18 (see torchvision.models.list_models())."
        )
    net = torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    if channels == 3:
        return net

    class RepeatChannels(nn.Module):  # torchvision models expect RGB
        def forward(self, x):
            return x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x

    return nn.Sequential(RepeatChannels(), net) if channels == 1 else net


def save_model(path, model, meta: dict) -> None:
    """model.pt: the weights plus everything needed to rebuild and feed the model."""
    import torch

    from stages.lib.io import write_bytes

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
    meta = blob["meta"]
    model = build_model(meta["model"], len(meta["classes"]), meta["channels"])
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
