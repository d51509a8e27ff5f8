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


# name: (conv widths, encoder width, encoder dilations). crnn is the default (0.42M parameters
# with the sample's 87 classes); crnn_large (1.58M) doubles the conv widths, widens the encoder
# to 256 and gives it six blocks (context of 25 frames each side).
SIZES = {"crnn": ((16, 32, 64), 160, (1, 2, 4, 1)),
         "crnn_large": ((32, 64, 128), 256, (1, 2, 4, 8, 2, 1))}


class CRNN(nn.Module):
    def __init__(self, classes: int, channels: int, height: int, width: int = 160,
                 convs=(16, 32, 64), dilations=(1, 2, 4, 1)):
        super().__init__()
        assert STRIDE == 4
        a, b, c = convs
        self.features = nn.Sequential(
            *block(channels, a), nn.MaxPool2d(2),              # H/2 x W/2
            *block(a, b), nn.MaxPool2d(2),                    # H/4 x W/4
            *block(b, c), *block(c, c), nn.MaxPool2d((2, 1)),  # H/8 x W/4
        )
        depth = c * (height // 8)
        self.encoder = nn.Sequential(
            nn.Conv1d(depth, width, 1, bias=False), nn.BatchNorm1d(width), nn.ReLU(inplace=True),
            *(Residual(width, d) for d in dilations))
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        f = self.features(x)  # N x C x H/8 x T
        n, c, h, t = f.shape
        f = self.encoder(f.reshape(n, c * h, t))  # N x width x T
        return self.head(f.transpose(1, 2))  # N x T x classes


def build_model(name: str, classes: int, channels: int, height: int):
    from stages.lib.io import StageError

    if name not in SIZES:
        raise StageError(f"train.model: {name!r} is not an OCR model; the ocr task has "
                         f"{', '.join(f'`{n}`' for n in SIZES)}.")
    if height % 8:
        raise StageError(f"prepare.height must be a multiple of 8 for the CRNN, got {height}")
    convs, width, dilations = SIZES[name]
    return CRNN(classes, channels, height, width, convs, dilations)
