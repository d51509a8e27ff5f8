"""The audio modality's fit settings: prepare's feature front end (prepare.audio, an
audiospec.AudioSpec) and channels (always 1: a spectrogram), each with one line saying what
was chosen and why. Headers only: nothing is decoded.
"""
from stages.lib.modality.audiospec import PARAMS_KEY, AudioSpec


def header(path) -> tuple[int, int, bool]:
    """(frames, sample rate, True) from the file's header: what init shows of the data (the
    fit facts every modality gives: two numbers and whether it has one channel). Whatever
    soundfile raises passes through."""
    import soundfile as sf

    info = sf.info(path)
    return int(info.frames), int(info.samplerate), True


def header_facts(path) -> tuple[int, bool]:
    """(frames, True) from one header read: prepare's auto facts (every clip is mono)."""
    frames, _, mono = header(path)
    return frames, mono


def choose_shape(p, lengths: list, multichannel: int, total: int) -> tuple:
    """(the spec's settings as meta.json stores them, 1, lines): prepare.audio's (a key left
    out takes its default), every clip one channel. lengths: the train clips' frame counts
    (unused)."""
    spec = AudioSpec.of(p.audio)
    how = "params.yaml" if p.audio else "the defaults"
    shown = ", ".join(f"{k} {v}" for k, v in spec.settings.items())
    size_line = (f"{PARAMS_KEY}: log-mel {shown} ({how}; every clip padded or cropped to "
                 f"{spec.seconds:g} s, centred)")
    channels_line = f"prepare.channels: 1 (a spectrogram; {total} clips mixed to mono)"
    return spec.settings, 1, [size_line, channels_line]
