"""The keyword classifier: a small CNN over the log-mel spectrogram (n_mels x frames, one
channel), with BatchNorm, strided convolutions (the first three halve both axes: the cost
stays low on CPU), global average pooling and a linear head; about 0.46M parameters."""

AUDIO_CNN = "audio_cnn"
WIDTHS = (48, 96, 160, 192)


def build_model(name: str, num_classes: int, channels: int = 1):
    from torch import nn

    if name != AUDIO_CNN:
        from stages.lib.io import StageError

        raise StageError(f"train.model: unknown model {name!r}; the audio task builds "
                         f"{AUDIO_CNN!r}.")

    def block(cin, cout, stride):
        return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                nn.BatchNorm2d(cout), nn.ReLU()]

    a, b, c, d = WIDTHS
    return nn.Sequential(
        *block(channels, a, 2), *block(a, b, 2), *block(b, c, 2), *block(c, d, 1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.1), nn.Linear(d, num_classes),
    )
