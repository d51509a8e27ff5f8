"""A small CRNN of our own: a conv stack that turns a 1 x H x W line into W / 4 frames, a 1-D
conv encoder over the frames (context of 9 frames each side), and a linear CTC head.
About 0.42M parameters; nothing downloaded. Convolutions only: deterministic on CPU and plain
to export to ONNX."""
from torch import nn

from stages.tasks.ocr.checks import STRIDE


def block(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True)]


class Residual(nn.Module):
    def __init__(self, width, dilation):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv1d(width, width, 3, padding=dilation, dilation=dilation, bias=False),
            nn.BatchNorm1d(width), nn.ReLU(inplace=True))

    def forward(self, x):
        return x + self.conv(x)


class CRNN(nn.Module):
    def __init__(self, classes: int, channels: int, height: int, width: int = 160):
        super().__init__()
        assert STRIDE == 4
        self.features = nn.Sequential(
            *block(channels, 16), nn.MaxPool2d(2),              # H/2 x W/2
            *block(16, 32), nn.MaxPool2d(2),                    # H/4 x W/4
            *block(32, 64), *block(64, 64), nn.MaxPool2d((2, 1)),  # H/8 x W/4
        )
        depth = 64 * (height // 8)
        self.encoder = nn.Sequential(
            nn.Conv1d(depth, width, 1, bias=False), nn.BatchNorm1d(width), nn.ReLU(inplace=True),
            Residual(width, 1), Residual(width, 2), Residual(width, 4), Residual(width, 1))
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        f = self.features(x)  # N x 64 x H/8 x T
        n, c, h, t = f.shape
        f = self.encoder(f.reshape(n, c * h, t))  # N x width x T
        return self.head(f.transpose(1, 2))  # N x T x classes


def build_model(name: str, classes: int, channels: int, height: int):
    from stages.lib.io import StageError

    if name != "crnn":
        raise StageError(f"train.model: {name!r} is not an OCR model; the ocr task has `crnn`.")
    if height % 8:
        raise StageError(f"prepare.height must be a multiple of 8 for the CRNN, got {height}")
    return CRNN(classes, channels, height)
