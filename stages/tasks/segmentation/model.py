"""Segmenters: a small U-Net of ours (the default) or a torchvision segmenter by name.

Every model returns plain N x K x H x W logits. torchvision's segmenters return a dict
({"out": ..., "aux": ...}): `Plain` keeps only "out", so training, ONNX export and inference
see one tensor. Nothing is downloaded (weights=None, weights_backbone=None).
"""
import torch
from torch import nn

TORCHVISION = ("lraspp_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large")


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class UNet(nn.Module):
    """Four levels (16-32-64-128 channels), max-pool down, transposed-conv up, skip
    concatenation: about 0.47M parameters. Input sides must be multiples of 8."""

    def __init__(self, channels: int, classes: int, width: int = 16):
        super().__init__()
        w = [width, width * 2, width * 4, width * 8]
        self.down = nn.ModuleList([block(channels, w[0]), block(w[0], w[1]), block(w[1], w[2])])
        self.bottom = block(w[2], w[3])
        self.up = nn.ModuleList([nn.ConvTranspose2d(w[i + 1], w[i], 2, stride=2)
                                 for i in (2, 1, 0)])
        self.merge = nn.ModuleList([block(w[i] * 2, w[i]) for i in (2, 1, 0)])
        self.head = nn.Conv2d(w[0], classes, 1)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        skips = []
        for down in self.down:
            x = down(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottom(x)
        for up, merge, skip in zip(self.up, self.merge, reversed(skips), strict=True):
            x = merge(torch.cat([up(x), skip], 1))
        return self.head(x)


class Plain(nn.Module):
    """A torchvision segmenter with its dict output reduced to the "out" tensor."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)["out"]


def build_model(name: str, classes: int, channels: int) -> nn.Module:
    from stages.lib.io import StageError

    if name in ("unet", "small_unet"):
        return UNet(channels, classes)
    if name in TORCHVISION:
        if channels != 3:
            raise StageError(f"train.model {name} takes RGB input: set prepare.channels: 3.")
        from torchvision.models import segmentation

        net = getattr(segmentation, name)(weights=None, weights_backbone=None,
                                          num_classes=classes)
        if hasattr(net, "aux_classifier"):
            net.aux_classifier = None
        return Plain(net)
    raise StageError(f"train.model {name!r} is not a segmenter; use unet or one of "
                     f"{', '.join(TORCHVISION)}.")


def head_name(model) -> str:
    """The head fine-tuning re-initialises on a class-count change and LoRA trains fully: the
    U-Net's 1x1 conv; a torchvision segmenter's classifier."""
    return "net.classifier" if isinstance(model, Plain) else "head"


def lora_targets(model) -> list:
    """LoRA's default targets: the U-Net's encoder, bottom and decoder blocks (its transposed
    convolutions cannot take an adapter and stay as loaded); a torchvision segmenter's
    backbone."""
    return ["net.backbone"] if isinstance(model, Plain) else ["down", "bottom", "merge"]
