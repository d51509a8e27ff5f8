"""The audio modality's fit settings: prepare's feature front end (its `image_size`, the
spec dict: sample_rate, n_fft, hop, n_mels, frames) and channels (always 1: a spectrogram),
each with one line saying what was chosen and why. Headers only: nothing is decoded.
"""
from stages.lib.modality.audiocore import SPEC_DEFAULTS, spec_of


def header(path) -> tuple[int, int, bool]:
    """(frames, sample rate, True) from the file's header: what init shows of the data (as
    the image modality's (width, height, grey)). Whatever soundfile raises passes through."""
    import soundfile as sf

    info = sf.info(path)
    return int(info.frames), int(info.samplerate), True


def header_facts(path) -> tuple[int, bool]:
    """(frames, True) from one header read: prepare's auto facts (every clip is 'grey')."""
    frames, _, grey = header(path)
    return frames, grey


def choose_shape(p, sides: list, colour: int, total: int) -> tuple:
    """(the feature spec, 1, lines): prepare.image_size is the spec (a mapping; auto = the
    defaults), every clip one channel. sides: the train clips' frame counts (unused but in
    the line)."""
    given = p.image_size if isinstance(p.image_size, dict) else {}
    spec = spec_of(given)
    how = "params.yaml" if given else "auto: the defaults"
    shown = ", ".join(f"{k} {spec[k]}" for k in SPEC_DEFAULTS)
    seconds = (spec["frames"] - 1) * spec["hop"] / spec["sample_rate"]
    size_line = (f"prepare.image_size: log-mel {shown} ({how}; every clip padded or cropped "
                 f"to {seconds:g} s, centred)")
    channels_line = f"prepare.channels: 1 (a spectrogram; {total} clips mixed to mono)"
    return spec, 1, [size_line, channels_line]
