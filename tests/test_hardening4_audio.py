"""Issue 54, items 5 and 9: the guarded audio decode predict and serve use
(stages/lib/modality/audioserve.py read / read_header) refuses what validate's audio gate
blocks, refuses sample rates outside MIN_RATE..MAX_RATE, counts the resampler in the decode
cost and keeps a bounded amount of resampler filter tables."""
import io
import tracemalloc

import numpy as np
import pytest
import soundfile as sf

from stages.lib.modality import get
from stages.lib.modality.errors import BadInput

audio = get("audio")
SPEC = {"sample_rate": 16000, "n_fft": 512, "hop": 160, "n_mels": 40, "frames": 101}


def tone(rate: int, seconds: float = 0.5, channels: int = 1) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    x = 0.3 * np.sin(2 * np.pi * 440 * t)
    return np.repeat(x[:, None], channels, axis=1) if channels > 1 else x


def wav(path, samples, rate=16000, subtype=None):
    sf.write(path, samples, rate, subtype=subtype)
    return path


@pytest.mark.parametrize("case", ["nan", "inf", "zero_frames", "eight_channels"])
def test_what_the_gate_blocks_gets_no_label(tmp_path, case):
    """Item 5: these clips were predicted (200 `ok` in serve); validate blocks them."""
    x = tone(16000)
    if case == "nan":
        x = np.full_like(x, np.nan)
    elif case == "inf":
        x[100] = np.inf
    elif case == "zero_frames":
        x = x[:0]
    else:
        x = tone(16000, channels=8)
    path = wav(tmp_path / f"{case}.wav", x, subtype="FLOAT")
    with pytest.raises(BadInput) as refused:
        audio.read(path, SPEC, 1)
    want = {"nan": "nonfinite", "inf": "nonfinite", "zero_frames": "zero_frames",
            "eight_channels": "channels"}[case]
    assert refused.value.kind == "corrupt" and str(refused.value).startswith(f"{want}: ")
    assert "validate blocks it too" in str(refused.value)
    assert audio.read(wav(tmp_path / "ok.wav", tone(16000, channels=2)), SPEC, 1).shape == \
        (40, 101, 1)


def test_rates_outside_the_range_are_refused_from_the_header(tmp_path):
    """Item 9: a 1-second WAV at 4 MHz passed every limit and peaked at 2.2 GB."""
    from stages.lib.modality.audioserve import MAX_RATE, MIN_RATE

    assert (MIN_RATE, MAX_RATE) == (4000, 192000)
    for rate in (4_000_000, 1000):
        path = wav(tmp_path / f"{rate}.wav", np.zeros(rate // 10, np.int16), rate)
        with pytest.raises(BadInput, match=f"sample rate {rate} Hz: outside 4000..192000"):
            audio.read(path, SPEC, 1)
        with pytest.raises(BadInput, match="outside"):
            audio.read_header(io.BytesIO(path.read_bytes()), 1, 0, 0, SPEC)


def test_the_decode_cost_covers_the_resampler_and_its_tables_are_bounded(tmp_path):
    """Item 9: the cost read_header admits is at least what the decode holds at its peak (the
    resampler's table and blocks were not counted), and an odd rate's large filter table is
    not kept after the decode (it was, per rate pair, never released)."""
    from stages.lib.modality import audiocore

    rate = 191_999  # gcd with 16 kHz is 1: a table of 16,000 outputs x 384 taps (98 MB)
    path = wav(tmp_path / "odd.wav", tone(rate, 0.2), rate)
    data = path.read_bytes()
    cost, _ = audio.read_header(io.BytesIO(data), 1, 0, 0, SPEC)
    tracemalloc.start()
    try:
        audio.read(io.BytesIO(data), SPEC, 1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= cost, (peak, cost)
    assert audiocore.cached_taps_bytes() <= audiocore.TAPS_CACHE_BYTES
    assert (rate, 16000) not in audiocore._TAPS
    with pytest.raises(BadInput, match="decode budget"):  # so serve's budget can refuse it
        audio.read_header(io.BytesIO(data), 1, 0, 64 * 2**20, SPEC)
