"""The classifier: a small CNN, or any torchvision classification architecture (no weights are
downloaded: pretrained weights come from a local file through train.init_from)."""

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
