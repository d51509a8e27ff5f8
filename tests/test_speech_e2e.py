"""The speech task end to end (issue 40), on one shared tiny run of its built-in sample (60
synthesized digit strings, 1 epoch): the nine stages unchanged, the test voices held out by
group, CER/WER greedy and beam, CER by clip length, the ONNX parity gate, predict's error rows,
serve's text answer and its 413. Plus the speech gate on a `path<TAB>transcript` tree with one
file of each fault."""
import json
import shutil

import httpx
import numpy as np
import pytest
import soundfile as sf

from stages.lib.io import read_csv
from tests.conftest import (ROOT, measured, predict_sample_clips, run_stage, run_tool, serving,
                            speech_params)

pytestmark = pytest.mark.e2e

def test_the_run_scores_text_and_keeps_voices_apart(speech_project):
    metrics = json.loads((speech_project / "metrics/eval.json").read_text())
    assert {"cer", "wer", "cer_beam", "wer_beam", "clip_accuracy", "confidence_auroc",
            "confidence_right", "confidence_wrong"} <= set(metrics)
    assert metrics["clips"] == len(read_csv(speech_project / "data/split/test.csv")) > 0
    predictions = read_csv(speech_project / "plots/eval/predictions.csv")
    # the confidence figures are those of the clips' rows (to 6 significant digits there)
    right = [float(r["confidence"]) for r in predictions if r["truth"] == r["predicted"]]
    wrong = [float(r["confidence"]) for r in predictions if r["truth"] != r["predicted"]]
    for key, values in (("confidence_right", right), ("confidence_wrong", wrong)):
        assert (metrics[key] is None if not values
                else metrics[key] == pytest.approx(np.mean(values), abs=1e-4)), key
    assert (metrics["confidence_auroc"] is None) == (not right or not wrong)
    assert {r["truth"] for r in predictions} <= {r["text"] for r in read_csv(
        speech_project / "data/split/test.csv")}
    by_duration = read_csv(speech_project / "plots/eval/cer_by_duration.csv")
    assert sum(int(r["clips"]) for r in by_duration) == metrics["clips"]
    meta = json.loads((speech_project / "data/processed/meta.json").read_text())
    assert meta["image_size"]["frames"] == 321 and meta["blank"] == 0
    # the lexicon: the train split's words; every answer is spelled in them
    from stages.tasks.speech.sample import WORDS

    assert meta["lexicon"] == sorted(WORDS) and metrics["lexicon_words"] == len(WORDS)
    assert {"cer_greedy", "wer_greedy"} <= set(metrics)
    assert all(set(r["predicted"].split()) <= set(WORDS) for r in predictions)
    assert set(meta["charset"]) <= set("abcdefghijklmnopqrstuvwxyz ")
    group_of = {r["path"]: r["group"] for r in read_csv(speech_project / "data/manifest.csv")}
    voices = {}
    for split in ("train", "val", "test"):
        for row in read_csv(speech_project / f"data/split/{split}.csv"):
            voices.setdefault(group_of[row["path"]], set()).add(split)
    assert all(len(s) == 1 for s in voices.values())  # no voice straddles
    assert {"test"} in voices.values() and {"train"} in voices.values()
    export = json.loads((speech_project / "metrics/export.json").read_text())
    assert export["text_agreement"] == 1.0 and measured(speech_project)["max_abs_diff"] < 1e-3
    html = (speech_project / "reports/run.html").read_text()
    assert "CER by clip duration" in html and "test CER" in html


def test_the_report_speaks_of_clips_seconds_and_sample_rates(speech_project):
    """Issue 57: the speech run's page names clips, seconds and the sample rate, never images
    or pixels."""
    from tests.test_input_spec import visible_text

    text = visible_text((speech_project / "reports/run.html").read_text())
    assert "3.2 s clips at 16000 Hz, log-mel 40 bands x 321 frames" in text
    assert "test clips" in text
    for word in ("image", "pixel", "px", "max_pixels", "BMP", "JPEG", "min_side"):
        assert word.lower() not in text.lower(), (word, text[:2000])


def clips(folder, speech_project, n=3):
    """n sample clips copied into folder, plus a truncated clip and a text file named .wav."""
    folder.mkdir()
    src = sorted((speech_project / "data/sample/clips").glob("*.wav"))[:n]
    for p in src:
        shutil.copy(p, folder / p.name)
    good = src[0].read_bytes()
    (folder / "cut.wav").write_bytes(good[:len(good) // 2])
    (folder / "notes.wav").write_text("this is a text file, not a recording\n")
    return src


def test_predict_writes_a_row_for_every_file_and_exits_3(speech_project, tmp_path):
    src = clips(tmp_path / "in", speech_project)
    shutil.copy(speech_project / "params.yaml", tmp_path / "params.yaml")
    proc = run_tool("predict", "in", "--model", str(speech_project / "models/model.onnx"),
                    "--out", "p.jsonl", "--beam", "4", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    rows = {r["path"].rsplit("/", 1)[-1]: r
            for r in map(json.loads, (tmp_path / "p.jsonl").read_text().splitlines())}
    assert set(rows) == {p.name for p in src} | {"cut.wav", "notes.wav"}
    assert rows["cut.wav"]["error"].startswith("corrupt:") and "truncated" in rows["cut.wav"][
        "error"]
    assert rows["notes.wav"]["error"].startswith("unsupported: not a sound file")
    assert rows["cut.wav"]["text"] == "" and rows["cut.wav"]["confidence"] is None
    charset = set(json.loads((speech_project / "data/processed/meta.json").read_text())[
        "charset"])
    lexicon = set(json.loads((speech_project / "data/processed/meta.json").read_text())[
        "lexicon"])
    for p in src:
        row = rows[p.name]
        assert row["error"] == "" and set(row["text"]) <= charset
        assert set(row["text"].split()) <= lexicon
        assert 0 <= row["confidence"] <= 1 and row["uncertain"] is False
    assert rows["cut.wav"]["uncertain"] is None
    # --min-confidence: a clip under it is answered as uncertain, its text kept
    proc = run_tool("predict", "in", "--model", str(speech_project / "models/model.onnx"),
                    "--out", "u.jsonl", "--min-confidence", "1", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    flagged = {r["path"].rsplit("/", 1)[-1]: r
               for r in map(json.loads, (tmp_path / "u.jsonl").read_text().splitlines())}
    for p in src:
        assert flagged[p.name]["uncertain"] is (flagged[p.name]["confidence"] < 1), p.name
        assert isinstance(flagged[p.name]["text"], str) and flagged[p.name]["error"] == ""
    assert any(flagged[p.name]["uncertain"] for p in src)  # a 1-epoch model is never sure


def test_predict_answers_the_confidence_evaluate_scores(speech_project, tmp_path):
    """Both read the test-time views (stages/tasks/speech/views.py): predict on a test clip
    gives the text and the confidence of evaluate's row for it."""
    metrics = json.loads((speech_project / "metrics/eval.json").read_text())
    assert metrics["confidence_views"] == 4
    rows = read_csv(speech_project / "plots/eval/predictions.csv")[:8]
    got, model, clips = predict_sample_clips(speech_project, [r["path"] for r in rows],
                                             tmp_path)
    for r in rows:
        assert got[r["path"]]["text"] == r["predicted"], r["path"]
        want = float(r["confidence"])  # tiny: the 1-epoch model's views disagree
        assert got[r["path"]]["confidence"] == pytest.approx(want, rel=1e-3, abs=0), r["path"]
    # without the views (the clip's own P(text | clip)) the confidences are not these
    from stages.tasks.speech import lexicon

    single = [c for _, c in lexicon.decode(model.logits(clips), model.meta["charset"],
                                           model.meta["lexicon"])]
    assert not np.allclose(single, [got[r["path"]]["confidence"] for r in rows], rtol=0.01,
                           atol=0)


def test_serve_answers_a_clip_with_text_and_refuses_an_over_long_one_with_413(
        speech_project, tmp_path):
    from stages.lib.modality.audioserve import MAX_SECONDS

    src = sorted((speech_project / "data/sample/clips").glob("*.wav"))[0]
    long = tmp_path / "long.wav"
    sf.write(long, np.zeros(int(8000 * (MAX_SECONDS + 2)), np.int16), 8000)
    with serving(speech_project / "models/model.onnx", tmp_path, "--min-confidence",
                 "1") as url:
        ok = httpx.post(f"{url}/predict", files=[("files", (src.name, src.read_bytes()))],
                        timeout=30)
        assert ok.status_code == 200, ok.text
        [pred] = ok.json()["predictions"]
        assert pred["error"] == "" and isinstance(pred["text"], str)
        assert 0 <= pred["confidence"] <= 1
        assert pred["uncertain"] is (pred["confidence"] < 1)  # --min-confidence 1
        over = httpx.post(f"{url}/predict", files=[("files", ("long.wav", long.read_bytes()))],
                          timeout=30)
        assert over.status_code == 413, over.text
        assert f"limit of {MAX_SECONDS:g} s" in over.json()["detail"]


# ---- the gate: one file of each fault, named by file; no input byte changed

def fault_tree(root):
    """A transcripts.txt tree with one file of each fault; {path: the check it must fail}."""
    rng = np.random.default_rng(0)

    def voiced(n=8000, f0=220.0):  # a voiced-like signal at a sane level
        t = np.arange(n) / 16000
        return 0.2 * np.sin(2 * np.pi * f0 * t) * (1 + 0.3 * np.sin(2 * np.pi * 3 * t))

    root.mkdir(parents=True)
    lines = []
    for i in range(8):
        sf.write(root / f"ok{i}.wav", voiced(f0=150 + 40 * i) + rng.normal(0, 0.01, 8000),
                 16000)
        lines.append(f"ok{i}.wav\tone two\tspk{i % 2}")
    good = (root / "ok0.wav").read_bytes()
    (root / "cut.wav").write_bytes(good[:len(good) // 2])
    (root / "text.wav").write_text("not audio at all\n" * 5)
    sf.write(root / "zero.wav", np.zeros(0), 16000)
    sf.write(root / "nan.wav", np.where(np.arange(8000) == 9, np.nan, voiced()), 16000,
             subtype="FLOAT")
    sf.write(root / "quiet.wav", np.zeros(8000), 16000)
    sf.write(root / "clipped.wav", np.clip(voiced() * 20, -1, 1), 16000)
    sf.write(root / "rate8k.wav", voiced(4000), 8000)
    sf.write(root / "four.flac", np.stack([voiced()] * 4, axis=1), 16000)
    sf.write(root / "long.ogg", np.tile(voiced(), 10), 16000, format="OGG")
    sf.write(root / "short.wav", voiced(800), 16000)
    for name in ("empty.wav", "invisible.wav", "unknown.wav"):
        sf.write(root / name, voiced(f0=500 + len(name) * 30) + rng.normal(0, 0.01, 8000),
                 16000)
    (root / "copy.wav").write_bytes((root / "ok1.wav").read_bytes())  # the same bytes
    data, rate = sf.read(root / "ok2.wav")
    sf.write(root / "near.wav", data * 0.9, rate)  # a quieter copy: the same log-mel hash
    lines += [f"{n}\tone two" for n in ("cut.wav", "text.wav", "zero.wav", "nan.wav",
                                       "quiet.wav", "clipped.wav", "rate8k.wav", "four.flac",
                                       "long.ogg", "short.wav", "copy.wav", "near.wav")]
    lines += ["empty.wav\t", "invisible.wav\t\u200b\u200b", "unknown.wav\tone tw\u00f6"]
    (root / "transcripts.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"cut.wav": "undecodable", "text.wav": "undecodable", "zero.wav": "zero_frames",
            "nan.wav": "nonfinite", "quiet.wav": "silence", "clipped.wav": "clipping",
            "rate8k.wav": "sample_rate", "four.flac": "channels", "long.ogg": "duration",
            "short.wav": "duration", "empty.wav": "empty_text",
            "invisible.wav": "invisible_text", "unknown.wav": "unknown_char",
            "copy.wav": "duplicate", "near.wav": "near_duplicate"}


def test_gate_names_every_fault_by_file_and_changes_no_byte(tmp_path):
    from tools.project import copy_project

    project = copy_project(ROOT, tmp_path / "project", params=speech_params(**{
        "task": "speech", "data.source": "data/clips", "split.by": "hash",
        "validate.max_seconds": 2.0, "validate.min_seconds": 0.1,
        "validate.near_dup_distance": 2}))
    root = project / "data/clips"
    expect = fault_tree(root)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert run_stage("ingest", cwd=project).returncode == 0
    rows = {r["path"]: r for r in read_csv(project / "data/manifest.csv")}
    assert rows["ok1.wav"]["group"] == "spk1" and rows["ok1.wav"]["text"] == "one two"
    assert rows["four.flac"]["channels"] == "4" and rows["rate8k.wav"]["sample_rate"] == "8000"
    proc = run_stage("validate", cwd=project)
    assert proc.returncode != 0
    warnings = {"silence", "clipping", "sample_rate", "duplicate", "near_duplicate"}
    page = (project / "reports/validation.html").read_text()
    for path, check in expect.items():
        if check in warnings:
            assert f": {check}: " in proc.stdout and path in proc.stdout.split(
                f": {check}: ", 1)[1].split("\n", 1)[0], (path, check, proc.stdout)
            assert path in page
        else:
            assert f"[{check}] {path}:" in proc.stderr, (path, check, proc.stderr)
    assert "[empty_text] empty.wav: empty transcript" in proc.stderr
    assert "holds only invisible characters (U+200B)" in proc.stderr
    assert "characters outside validate.charset: 'ö'" in proc.stderr
    assert "ok3.wav" not in proc.stderr  # a good clip is named nowhere
    counts = json.loads((project / "metrics/validation_checks.json").read_text())
    assert counts["undecodable"] == 2 and counts["duration"] == 2
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before  # untouched
