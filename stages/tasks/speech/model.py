"""A small CNN + BiGRU of our own for CTC over log-mel features: two strided convolutions turn
the 1 x n_mels x T spectrogram into T / 2 frames (STRIDE), a 1x1 projection, a bidirectional GRU
over the frames, and a linear CTC head. About 0.25M parameters (cnn_bigru); nothing downloaded.
Deterministic on CPU; exports to ONNX (the GRU as one ONNX GRU node)."""
from torch import nn

from stages.tasks.speech.checks import STRIDE

# name: (conv width, projection width, GRU hidden size per direction, GRU layers)
# cnn_bigru is the default (0.25M parameters with the sample's 17 classes); cnn_bigru_large
# stacks a second GRU layer (0.55M, about 1.6x the time a step), cnn_bigru_small halves the
# convolutions and narrows the GRU (0.13M, about 0.6x)
SIZES = {"cnn_bigru": (32, 128, 128, 1),
         "cnn_bigru_small": (16, 96, 96, 1),
         "cnn_bigru_large": (32, 128, 128, 2)}


def block(cin, cout, stride):
    return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True)]


def half(n: int) -> int:
    """The length a stride-2, kernel-3, padding-1 convolution leaves of n."""
    return (n + 1) // 2


class CNNBiGRU(nn.Module):
    def __init__(self, classes: int, mels: int, conv=32, width=128, hidden=128, layers=2):
        super().__init__()
        assert STRIDE == 2
        self.features = nn.Sequential(*block(1, conv, (2, 2)), *block(conv, conv, (2, 1)))
        depth = conv * half(half(mels))  # the mel bands after the two strided convs
        self.proj = nn.Sequential(nn.Conv1d(depth, width, 1, bias=False), nn.BatchNorm1d(width),
                                  nn.ReLU(inplace=True))
        self.rnn = nn.GRU(width, hidden, num_layers=layers, batch_first=True,
                          bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        if x.dim() == 3:  # N x mels x T
            x = x.unsqueeze(1)
        f = self.features(x)  # N x C x mels/4 x T/2
        n, c, m, t = f.shape
        f = self.proj(f.reshape(n, c * m, t)).transpose(1, 2)  # N x T/2 x width
        f, _ = self.rnn(f)
        return self.head(f)  # N x T/2 x classes


def build_model(name: str, classes: int, mels: int):
    from stages.lib.io import StageError

    if name not in SIZES:
        raise StageError(f"train.model: {name!r} is not a speech model; the speech task has "
                         f"{', '.join(f'`{n}`' for n in SIZES)}.")
    conv, width, hidden, layers = SIZES[name]
    return CNNBiGRU(classes, mels, conv, width, hidden, layers)
