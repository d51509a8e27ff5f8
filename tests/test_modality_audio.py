"""The audio modality (stages/lib/modality/audio.py and its parts), on real sound files made
with soundfile and speech_synth: inspect's facts, the gate's checks, the fingerprint, the
features prepare stores and predict/serve read (byte for byte the same), SpecAugment."""
import io
import types

import numpy as np
import pytest
import soundfile as sf

from stages.tasks.common import speech_synth
from stages.lib.modality import get
from stages.lib.modality.audiospec import AudioSpec
from stages.lib.modality.errors import BadInput

audio = get("audio")

SPEC = AudioSpec()  # the defaults: 16 kHz, n_fft 512, hop 160, 40 mel bands, 101 frames


@pytest.fixture(scope="module")
def word():
    """int16 "yes" at 16 kHz, synthesized."""
    [raw] = speech_synth.synthesize([("yes", "m3", 160, 50)])
    return speech_synth.post_process(raw, 16000, seed=1, gain=0.8, noise=0.002, echo=0.3)


def write(path, samples, rate=16000, **kw):
    sf.write(path, samples, rate, **kw)
    return path


def test_inspect_records_the_manifest_facts(tmp_path, word):
    path = write(tmp_path / "a.wav", word)
    facts = audio.inspect(path, 0)
    assert list(facts) == list(audio.FIELDS)
    assert facts["error"] == "" and facts["format"] == "WAV" and facts["subtype"] == "PCM_16"
    assert facts["sample_rate"] == 16000 and facts["channels"] == 1
    assert facts["frames"] == len(word)
    assert float(facts["duration"]) == pytest.approx(len(word) / 16000, abs=1e-4)
    x = word / 32768.0
    assert float(facts["peak"]) == pytest.approx(np.abs(x).max(), abs=1e-5)
    assert float(facts["rms"]) == pytest.approx(np.sqrt(np.mean(x ** 2)), abs=1e-5)
    assert len(facts["mel_hash"]) == 16
    # the same from a file object (ingest hands small files over as bytes)
    assert audio.inspect(io.BytesIO(path.read_bytes()), 0) == facts


@pytest.mark.parametrize("fmt", ["FLAC", "OGG"])
def test_flac_and_ogg_are_read(tmp_path, word, fmt):
    path = write(tmp_path / f"a.{fmt.lower()}", word, format=fmt)
    facts = audio.inspect(path, 0)
    assert facts["error"] == "" and facts["format"] == fmt and facts["frames"] == len(word)
    sample, size = audio.decode(path, SPEC)
    assert sample.shape == (40, 101, 1) and size == (len(word), 16000)


def test_broken_files_are_undecodable_naming_why(tmp_path, word):
    good = write(tmp_path / "a.wav", word).read_bytes()
    (tmp_path / "cut.wav").write_bytes(good[:len(good) // 2])
    (tmp_path / "text.wav").write_bytes(b"this is not audio\n" * 10)
    cut = audio.inspect(tmp_path / "cut.wav", 0)
    assert cut["error_kind"] == "undecodable" and "truncated" in cut["error"]
    text = audio.inspect(tmp_path / "text.wav", 0)
    assert text["error_kind"] == "undecodable" and str(tmp_path) not in text["error"]
    big = audio.inspect(write(tmp_path / "b.wav", word), 0.1)  # validate.max_seconds 0.1
    assert big["error_kind"] == "duration" and "over validate.max_seconds (0.1 s)" in big["error"]
    assert big["format"] == "WAV" and float(big["duration"]) > 0.1 and big["mel_hash"] == ""


def gate(rows, p):
    """{check: [paths]} of the audio checks' expectations, evaluated by hand over the
    columns (validate runs great_expectations over the same columns)."""
    ok = [not r["error"] for r in rows]
    columns = audio.check_columns(rows, ok, p)
    bounds = {"zero_frames": ("frames", 1, None), "nonfinite": ("nonfinite", None, 0),
              "channels": ("channels", None, 2),
              "duration": ("duration", p.min_seconds, p.max_seconds),
              "silence": ("rms_db", p.silence_db, None),
              "clipping": ("clipped", None, p.max_clipped)}
    out = {}
    for check, (column, lo, hi) in bounds.items():
        for r, v in zip(rows, columns[column], strict=True):
            if v is not None and ((lo is not None and v < lo) or (hi is not None and v > hi)):
                out.setdefault(check, []).append(r["path"])
    return out


def test_each_fault_is_found_in_its_own_file_and_named(tmp_path, word):
    x = word / 32768.0
    files = {
        "good.wav": (x, {}),
        "zero.wav": (np.zeros(0), {}),
        "nan.wav": (np.where(np.arange(len(x)) == 100, np.nan, x), {"subtype": "FLOAT"}),
        "quiet.wav": (np.zeros(16000), {}),
        "clipped.wav": (np.clip(x * 40, -1, 1), {}),
        "four.wav": (np.stack([x] * 4, axis=1), {}),
        "long.wav": (np.tile(x, 10), {}),
    }
    rows = []
    for name, (samples, kw) in files.items():
        facts = audio.inspect(write(tmp_path / name, samples, **kw), 0)
        rows.append({"path": name, **facts})
    p = types.SimpleNamespace(min_seconds=0.1, max_seconds=2.0, silence_db=-60.0,
                              max_clipped=0.01)
    found = gate(rows, p)
    assert found == {"zero_frames": ["zero.wav"], "nonfinite": ["nan.wav"],
                     "channels": ["four.wav"], "duration": ["long.wav"],
                     "silence": ["quiet.wav"], "clipping": ["clipped.wav"]}
    by_path = {r["path"]: r for r in rows}
    assert "1 NaN or infinite" in audio.reason("nonfinite", by_path["nan.wav"], p)
    assert "4 channels" in audio.reason("channels", by_path["four.wav"], p)
    assert "0.1..2.0 s" in audio.reason("duration", by_path["long.wav"], p)
    assert "validate.silence_db" in audio.reason("silence", by_path["quiet.wav"], p)
    assert "% of the samples at full scale" in audio.reason("clipping", by_path["clipped.wav"], p)
    assert audio.reason("format", by_path["good.wav"], p) is None  # not an audio check
    assert set(found) <= set(audio.CHECKS)


def test_the_sample_rate_check_counts_files_by_rate():
    from stages.lib.modality.audiogate import rate_columns, rate_reason

    rows = [{"sample_rate": r} for r in (16000, 8000, 44100, 8000, "")]
    columns, counts = rate_columns(rows, [True] * 5, 16000)
    assert columns == {"sample_rate": [1, 0, 0, 0, None]}
    assert counts == {8000: 2, 44100: 1}
    assert "8000 Hz: 2, 44100 Hz: 1" in rate_reason(rows[1], 16000, counts)


def test_fingerprint_keeps_near_duplicates_close_and_other_words_far(word):
    from stages.lib.modality.audiocore import mel_hash

    x = word / 32768.0
    [other] = speech_synth.synthesize([("stop", "f2", 140, 70)])
    noisy = x + np.random.default_rng(0).normal(0, 0.002, len(x))

    def distance(a, b):
        return bin(int(mel_hash(a, 16000), 16) ^ int(mel_hash(b, 16000), 16)).count("1")

    assert distance(x, 0.5 * x) <= 2  # quieter: the same clip
    assert distance(x, noisy) <= 6
    assert distance(x, other / 32768.0) > 12
    assert audio.fingerprint({"mel_hash": mel_hash(x, 16000), "error": ""}) > 0
    assert audio.fingerprint({"mel_hash": "", "error": ""}) is None


def test_prepare_and_predict_give_the_same_feature_bytes(tmp_path, word):
    """decode (prepare) and read (predict, serve; path or upload) agree byte for byte, at the
    file's own rate and at another (resampled)."""
    for rate in (16000, 22050, 8000):
        path = write(tmp_path / f"a{rate}.wav", word, rate)
        facts, sizes = [], []
        stored, size = audio.decode(path, SPEC, facts, sizes)
        assert stored.dtype == np.uint8 and stored.shape == audio.input_shape(SPEC)
        read = audio.read(path, SPEC)
        upload = audio.read(io.BytesIO(path.read_bytes()), SPEC)
        assert stored.tobytes() == read.tobytes() == upload.tobytes()
        assert size == read.source_size == (len(word), rate)
        assert facts == [(len(word), True)] and sizes == [(len(word), rate)]
    assert audio.input_spec(SPEC.to_meta()) == (1, 40, 101)
    assert audio.warmup_input(SPEC).shape == (40, 101, 1)


def test_features_follow_the_spec_and_are_padded_or_cropped(tmp_path, word):
    path = write(tmp_path / "a.wav", word)
    spec = AudioSpec(n_mels=64, frames=50)
    sample, _ = audio.decode(path, spec)
    assert sample.shape == (64, 50, 1)
    long = write(tmp_path / "long.wav", np.tile(word, 5))
    assert audio.decode(long, SPEC)[0].shape == (40, 101, 1)
    silent = audio.decode(write(tmp_path / "s.wav", np.zeros(8000)), SPEC)[0]
    assert silent.max() == 0  # silence stays dark (not scaled up to full range)
    loud = audio.decode(path, SPEC)[0]
    assert loud.max() == 255 and loud.min() < 64


def test_read_refuses_what_is_no_sound_or_over_the_limits(tmp_path, word):
    from stages.lib.modality.audioserve import MAX_SECONDS

    good = write(tmp_path / "a.wav", word).read_bytes()
    (tmp_path / "cut.wav").write_bytes(good[:len(good) // 2])
    (tmp_path / "text.wav").write_bytes(b"hello, not audio\n" * 20)
    with pytest.raises(BadInput) as cut:
        audio.read(tmp_path / "cut.wav", SPEC)
    assert cut.value.kind == "corrupt" and "truncated" in str(cut.value)
    with pytest.raises(BadInput) as text:
        audio.read(tmp_path / "text.wav", SPEC)
    assert text.value.kind == "unsupported" and "not a sound file" in str(text.value)
    long = write(tmp_path / "long.wav", np.zeros(int(8000 * (MAX_SECONDS + 1)), np.int16), 8000)
    with pytest.raises(BadInput) as over:
        audio.read(long, SPEC)
    assert over.value.kind == "too_long" and f"{MAX_SECONDS:g} s" in str(over.value)
    with pytest.raises(BadInput, match="--max-seconds"):
        audio.read(tmp_path / "a.wav", SPEC, 0.01)
    cost, draft = audio.read_header(io.BytesIO(good), SPEC, 0, 0)
    assert cost > 0 and draft is None
    with pytest.raises(BadInput, match="decode budget"):
        audio.read_header(io.BytesIO(good), SPEC, 0, 1000)


def test_normalize_matches_the_formula():
    batch = np.random.default_rng(0).integers(0, 256, (3, 40, 101, 1), dtype=np.uint8)
    x = audio.normalize(batch, [0.4], [0.2])
    assert x.shape == (3, 1, 40, 101) and x.dtype == np.float32
    want = ((batch.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255))
            - np.float32(0.4)) / np.float32(0.2)
    assert x.tobytes() == want.astype(np.float32).tobytes()


def test_specaugment_is_seeded_and_masks_bands_and_frames():
    import torch

    x = torch.arange(40 * 101, dtype=torch.float32).reshape(1, 40, 101)
    p = types.SimpleNamespace(aug_time_mask=12, aug_freq_mask=6, aug_masks=2)
    a, b = audio.augment(x, p, 123), audio.augment(x, p, 123)
    assert torch.equal(a, b) and not torch.equal(a, audio.augment(x, p, 124))
    changed = a != x
    assert changed.any() and changed.float().mean() < 0.5
    off = types.SimpleNamespace(aug_time_mask=0, aug_freq_mask=0, aug_masks=2)
    assert audio.augment(x, off, 123) is x
    # the frequency masks draw the same numbers whether time masks are on or not
    only_freq = audio.augment(x, types.SimpleNamespace(aug_time_mask=0, aug_freq_mask=6,
                                                       aug_masks=2), 123)
    rows = (only_freq != x).all(dim=2)[0]
    assert ((a != x).all(dim=2)[0] | ~rows).all()


def test_thumbnail_draws_a_spectrogram():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    audio.thumbnail(ax, np.zeros((40, 101, 1), np.uint8))
    assert ax.images and ax.images[0].get_array().shape == (40, 101)
    plt.close(fig)


def test_resample_is_a_lowpassed_rate_change():
    from stages.lib.modality.audiocore import resample

    t = np.arange(22050) / 22050
    low = np.sin(2 * np.pi * 440 * t)
    high = np.sin(2 * np.pi * 10000 * t)  # above 16 kHz's Nyquist: filtered out
    y = resample(low, 22050, 16000)
    assert len(y) == 16000
    ref = np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)
    assert np.abs(y[100:-100] - ref[100:-100]).max() < 0.02
    assert np.abs(resample(high, 22050, 16000)[100:-100]).max() < 0.05
    assert resample(low, 22050, 16000).tobytes() == y.tobytes()
