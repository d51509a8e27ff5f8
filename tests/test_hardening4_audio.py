"""Issue 54, items 5 and 9: the guarded audio decode predict and serve use
(stages/lib/modality/audioserve.py read / read_header) refuses what validate's audio gate
blocks, refuses sample rates outside MIN_RATE..MAX_RATE, counts the resampler in the decode
cost and keeps a bounded amount of resampler filter tables."""
import io
from pathlib import Path
import tracemalloc

import numpy as np
import pytest
import soundfile as sf

from stages.lib.modality import get
from stages.lib.modality.audiospec import AudioSpec
from stages.lib.modality.errors import BadInput

audio = get("audio")

SPEC = AudioSpec()  # the defaults: 16 kHz, n_fft 512, hop 160, 40 mel bands, 101 frames


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
        audio.read(path, SPEC)
    want = {"nan": "nonfinite", "inf": "nonfinite", "zero_frames": "zero_frames",
            "eight_channels": "channels"}[case]
    assert refused.value.kind == "corrupt" and str(refused.value).startswith(f"{want}: ")
    assert "validate blocks it too" in str(refused.value)
    assert audio.read(wav(tmp_path / "ok.wav", tone(16000, channels=2)), SPEC).shape == \
        (40, 101, 1)


def test_rates_outside_the_range_are_refused_from_the_header(tmp_path):
    """Item 9: a 1-second WAV at 4 MHz passed every limit and peaked at 2.2 GB."""
    from stages.lib.modality.audioserve import MAX_RATE, MIN_RATE

    assert (MIN_RATE, MAX_RATE) == (4000, 192000)
    for rate in (4_000_000, 1000):
        path = wav(tmp_path / f"{rate}.wav", np.zeros(rate // 10, np.int16), rate)
        with pytest.raises(BadInput, match=f"sample rate {rate} Hz: outside 4000..192000"):
            audio.read(path, SPEC)
        with pytest.raises(BadInput, match="outside"):
            audio.read_header(io.BytesIO(path.read_bytes()), SPEC, 0, 0)


def test_the_decode_cost_covers_the_resampler_and_its_tables_are_bounded(tmp_path):
    """Item 9: the cost read_header admits is at least what the decode holds at its peak (the
    resampler's table and blocks were not counted), and an odd rate's large filter table is
    not kept after the decode (it was, per rate pair, never released)."""
    from stages.lib.modality import audiocore

    rate = 191_999  # gcd with 16 kHz is 1: a table of 16,000 outputs x 384 taps (98 MB)
    path = wav(tmp_path / "odd.wav", tone(rate, 0.2), rate)
    data = path.read_bytes()
    cost, _ = audio.read_header(io.BytesIO(data), SPEC, 0, 0)
    tracemalloc.start()
    try:
        audio.read(io.BytesIO(data), SPEC)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= cost, (peak, cost)
    assert audiocore.cached_taps_bytes() <= audiocore.TAPS_CACHE_BYTES
    assert (rate, 16000) not in audiocore._TAPS
    with pytest.raises(BadInput, match="decode budget"):  # so serve's budget can refuse it
        audio.read_header(io.BytesIO(data), SPEC, 0, 64 * 2**20)


@pytest.fixture(scope="module")
def audio_model(tmp_path_factory):
    """A tiny audio classifier (log-mel input, constant logits favouring `yes`), with the
    metadata the export stage writes; written with onnx's helper, no training."""
    import json

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Flatten", ["input"], ["flat"]),
         helper.make_node("MatMul", ["flat", "w"], ["mm"]),
         helper.make_node("Add", ["mm", "b"], ["logits"])],
        "audio", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 1, 40, 101])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 2])],
        [numpy_helper.from_array(np.zeros((40 * 101, 2), np.float32), "w"),
         numpy_helper.from_array(np.array([0.0, 4.0], np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for key, value in {"task": "audio", **SPEC.to_meta(), "classes": ["no", "yes"]}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, json.dumps(value)
    path = tmp_path_factory.mktemp("audio_model") / "audio.onnx"
    onnx.save(model, str(path))
    return path


def test_predict_writes_an_error_row_and_serve_answers_422(audio_model, tmp_path):
    """Item 5 end to end: predict and serve used to label these clips (200 `ok`)."""
    import json

    from fastapi.testclient import TestClient

    from tests.conftest import run_tool
    from tools.inference import load
    from tools.serve.app import create_app

    clips = tmp_path / "clips"
    clips.mkdir()
    wav(clips / "ok.wav", tone(16000))
    bad = tone(16000)
    bad[7] = np.nan
    wav(clips / "nan.wav", bad, subtype="FLOAT")
    wav(clips / "eight.wav", tone(16000, channels=8))
    proc = run_tool("predict", clips, "--model", audio_model, "--out", "-")
    rows = {Path(r["path"]).name: r for r in map(json.loads, proc.stdout.splitlines())}
    assert rows["ok.wav"]["label"] == "yes" and rows["ok.wav"]["error"] == ""
    assert rows["nan.wav"]["label"] == "" and "nonfinite" in rows["nan.wav"]["error"]
    assert rows["eight.wav"]["label"] == "" and "8 channels" in rows["eight.wav"]["error"]
    with TestClient(create_app(load("onnxruntime", audio_model))) as client:
        refused = client.post("/predict", files=[("files", ("nan.wav",
                                                            (clips / "nan.wav").read_bytes()))])
        assert refused.status_code == 422 and "nonfinite" in refused.json()["detail"]
        mixed = client.post("/predict", files=[
            ("files", ("ok.wav", (clips / "ok.wav").read_bytes())),
            ("files", ("eight.wav", (clips / "eight.wav").read_bytes()))])
        assert mixed.status_code == 200 and mixed.json()["status"] == "partial"
