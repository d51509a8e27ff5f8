"""The audio task end to end (issue 40), on one shared tiny run of its built-in sample (14
voice variants x 20 words, 1 epoch): the nine stages unchanged, the speakers (voice variants)
held out by group, the features recorded, predict's error rows, serve's 413, the report's
players. Plus the audio gate on a tree with one file of each fault."""
import json
import shutil

import httpx
import numpy as np
import pytest
import soundfile as sf

from stages.lib.io import read_csv
from tests.conftest import (ROOT, audio_params, predict_sample_clips, run_stage, run_tool,
                            serving)

pytestmark = pytest.mark.e2e


def test_the_run_scores_records_the_features_and_keeps_voices_apart(audio_project):
    metrics = json.loads((audio_project / "metrics/eval.json").read_text())
    assert {"accuracy", "balanced_accuracy", "f1_macro"} <= set(metrics)
    per_class = json.loads((audio_project / "plots/eval/per_class.json").read_text())
    assert len(per_class) == 20 and {"f1", "precision", "recall"} <= set(per_class["yes"])
    assert (audio_project / "plots/eval/confusion.csv").is_file()
    meta = json.loads((audio_project / "data/processed/meta.json").read_text())
    assert meta["image_size"] == {"sample_rate": 16000, "n_fft": 512, "hop": 160, "n_mels": 24,
                                  "frames": 101} and meta["channels"] == 1
    import onnx

    props = {p.key: p.value for p in onnx.load(audio_project / "models/model.onnx")
             .metadata_props}
    assert json.loads(props["image_size"]) == meta["image_size"]
    groups = {}
    for split in ("train", "val", "test"):
        for row in read_csv(audio_project / f"data/split/{split}.csv"):
            voice = row["path"].rsplit("/", 1)[-1].split("_nohash_")[0]  # the group
            groups.setdefault(voice, set()).add(split)
    assert len(groups) == 14 and all(len(s) == 1 for s in groups.values())  # no voice straddles
    assert any(s == {"test"} for s in groups.values())


def test_the_report_plays_the_worst_cases(audio_project):
    html = (audio_project / "reports/run.html").read_text()
    assert "Listen to the worst cases" in html
    assert '<audio controls preload="none" src="data:audio/wav;base64,' in html
    assert "confusion" in html


def test_the_report_speaks_of_clips_seconds_and_sample_rates(audio_project):
    """Issue 57: the page an audio run writes names clips, seconds and the sample rate, never
    images or pixels, and lists no image-only param (validate.formats, max_pixels)."""
    from tests.test_input_spec import visible_text

    text = visible_text((audio_project / "reports/run.html").read_text())
    assert "1 s clips at 16000 Hz, log-mel 24 bands x 101 frames" in text
    assert "test clips" in text and "usable clips" in text
    for word in ("image", "pixel", "px", "max_pixels", "BMP", "JPEG", "min_side"):
        assert word.lower() not in text.lower(), (word, text[:2000])


def clips(folder, audio_project, n=3):
    """n sample clips copied into folder, plus a truncated clip and a text file named .wav."""
    folder.mkdir()
    src = sorted((audio_project / "data/sample/yes").glob("*.wav"))[:n]
    for p in src:
        shutil.copy(p, folder / p.name)
    good = src[0].read_bytes()
    (folder / "cut.wav").write_bytes(good[:len(good) // 2])
    (folder / "notes.wav").write_text("this is a text file, not a recording\n")
    return src


def test_predict_writes_a_row_for_every_file_and_exits_3(audio_project, tmp_path):
    src = clips(tmp_path / "in", audio_project)
    shutil.copy(audio_project / "params.yaml", tmp_path / "params.yaml")
    proc = run_tool("predict", "in", "--model", str(audio_project / "models/model.onnx"),
                    "--out", "p.jsonl", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    rows = {r["path"].rsplit("/", 1)[-1]: r
            for r in map(json.loads, (tmp_path / "p.jsonl").read_text().splitlines())}
    assert set(rows) == {p.name for p in src} | {"cut.wav", "notes.wav"}
    assert rows["cut.wav"]["error"].startswith("corrupt:") and "truncated" in rows["cut.wav"][
        "error"]
    assert rows["notes.wav"]["error"].startswith("unsupported: not a sound file")
    for p in src:
        row = rows[p.name]
        assert row["error"] == "" and row["label"] in json.loads(
            (audio_project / "data/processed/meta.json").read_text())["classes"]
        assert 0 <= row["score"] <= 1 and row["topk"][0]["label"] == row["label"]


def test_predict_answers_as_evaluate_from_the_clip_and_its_views(audio_project, tmp_path):
    """Both average the model's probabilities over the clip and its test-time views
    (stages/tasks/audio/views.py): predict on evaluate's bad cases gives their label and score,
    and the clip alone would not."""
    bad = read_csv(audio_project / "plots/eval/bad_cases.csv")
    assert bad  # a 1-epoch model
    got, model, clips = predict_sample_clips(audio_project, [r["path"] for r in bad], tmp_path)
    for r in bad:
        assert got[r["path"]]["label"] == r["predicted"], r["path"]
        assert got[r["path"]]["score"] == pytest.approx(float(r["confidence"]), abs=2e-6)
    alone = [d["score"] for d in model.task.decode(model.logits(clips), model.meta, 1)]
    assert not np.allclose(alone, [got[r["path"]]["score"] for r in bad], atol=1e-3)


def test_serve_answers_a_clip_and_refuses_an_over_long_one_with_413(audio_project, tmp_path):
    from stages.lib.modality.audioserve import MAX_SECONDS

    src = sorted((audio_project / "data/sample/no").glob("*.wav"))[0]
    long = tmp_path / "long.wav"
    sf.write(long, np.zeros(int(8000 * (MAX_SECONDS + 2)), np.int16), 8000)
    with serving(audio_project / "models/model.onnx", tmp_path) as url:
        ok = httpx.post(f"{url}/predict", files=[("files", (src.name, src.read_bytes()))],
                        timeout=30)
        assert ok.status_code == 200, ok.text
        [pred] = ok.json()["predictions"]
        assert pred["error"] == "" and pred["label"] and 0 <= pred["score"] <= 1
        over = httpx.post(f"{url}/predict", files=[("files", ("long.wav", long.read_bytes()))],
                          timeout=30)
        assert over.status_code == 413, over.text
        assert f"limit of {MAX_SECONDS:g} s" in over.json()["detail"]
        text = httpx.post(f"{url}/predict", files=[("files", ("a.wav", b"not audio" * 10))],
                          timeout=30)
        assert text.status_code == 415


# ---- the gate: one file of each fault, named by file; no input byte changed

def fault_tree(root):
    """A folder per class with one file of each fault; {path: the check it must fail}."""
    rng = np.random.default_rng(0)

    def speech(n=8000):  # a voiced-like signal at a sane level
        t = np.arange(n) / 16000
        return 0.2 * np.sin(2 * np.pi * 220 * t) * (1 + 0.3 * np.sin(2 * np.pi * 3 * t))

    for label in ("yes", "no"):
        (root / label).mkdir(parents=True)
        for i in range(6):
            sf.write(root / label / f"s{i}_nohash_0.wav", speech() + rng.normal(0, 0.01, 8000),
                     16000)
    good = (root / "yes/s0_nohash_0.wav").read_bytes()
    (root / "yes/cut.wav").write_bytes(good[:len(good) // 2])
    (root / "yes/text.wav").write_text("not audio at all\n" * 5)
    sf.write(root / "yes/zero.wav", np.zeros(0), 16000)
    sf.write(root / "yes/nan.wav",
             np.where(np.arange(8000) == 9, np.nan, speech()), 16000, subtype="FLOAT")
    sf.write(root / "yes/quiet.wav", np.zeros(8000), 16000)
    sf.write(root / "no/clipped.wav", np.clip(speech() * 20, -1, 1), 16000)
    sf.write(root / "no/rate8k.wav", speech(4000), 8000)
    sf.write(root / "no/four.wav", np.stack([speech()] * 4, axis=1), 16000)
    sf.write(root / "no/long.ogg", np.tile(speech(), 10), 16000, format="OGG")
    return {"yes/cut.wav": "undecodable", "yes/text.wav": "undecodable",
            "yes/zero.wav": "zero_frames", "yes/nan.wav": "nonfinite",
            "yes/quiet.wav": "silence", "no/clipped.wav": "clipping",
            "no/rate8k.wav": "sample_rate", "no/four.wav": "channels",
            "no/long.ogg": "duration"}


def test_gate_names_every_fault_by_file_and_changes_no_byte(tmp_path):
    from tools.project import copy_project

    project = copy_project(ROOT, tmp_path / "project", params=audio_params(**{"task": "audio",
        "data.source": "data/clips", "validate.max_seconds": 2.0}))
    root = project / "data/clips"
    expect = fault_tree(root)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert run_stage("ingest", cwd=project).returncode == 0
    rows = {r["path"]: r for r in read_csv(project / "data/manifest.csv")}
    assert rows["no/rate8k.wav"]["sample_rate"] == "8000"
    assert rows["no/four.wav"]["channels"] == "4" and rows["no/long.ogg"]["format"] == "OGG"
    assert float(rows["yes/s1_nohash_0.wav"]["duration"]) == 0.5
    assert rows["yes/s1_nohash_0.wav"]["group"] == "s1"  # the speaker, before _nohash_
    proc = run_stage("validate", cwd=project)
    assert proc.returncode != 0
    warnings = {"silence", "clipping", "sample_rate"}  # named on stdout and in the report
    page = (project / "reports/validation.html").read_text()
    for path, check in expect.items():
        if check in warnings:
            assert f"warning: 1 files: {check}: {path} " in proc.stdout, (path, proc.stdout)
            assert path in page
        else:
            assert f"[{check}] {path}:" in proc.stderr, (path, check, proc.stderr)
    assert "resampled (files resampled, by rate: 8000 Hz: 1)" in page
    assert "1 NaN or infinite samples" in proc.stderr and "4 channels" in proc.stderr
    assert "s3_nohash_0" not in proc.stderr
    counts = json.loads((project / "metrics/validation_checks.json").read_text())
    assert counts["undecodable"] == 2 and counts["duration"] == 1 and counts["sample_rate"] == 1
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before  # untouched
