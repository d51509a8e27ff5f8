"""The OCR task end to end (issue 20), on the session's tiny `dvc repro` (ocr_project): the outs,
a second repro that does nothing, predictions from tools.predict and a real tools.serve that
decode exactly as evaluate did, and a parity gate that fails on a perturbed export, naming the
worst line."""
import json
import shutil

import httpx
import pytest

from stages.lib.io import read_csv
from tests.conftest import copy_run, run_stage, run_tool, serving


def test_outs_metrics_and_model_metadata(ocr_project):
    eval_metrics = json.loads((ocr_project / "metrics/eval.json").read_text())
    for key in ("cer", "wer", "word_accuracy", "line_accuracy", "lines", "characters"):
        assert key in eval_metrics, key
    assert set(eval_metrics["per_class_accuracy"]) >= {"digit", "lower"}
    for name in ("predictions.csv", "bad_cases.csv", "confusions.csv", "cer_distribution.csv",
                 "per_class.json"):
        assert (ocr_project / "plots/eval" / name).is_file(), name
    meta = json.loads((ocr_project / "data/processed/meta.json").read_text())
    train_chars = {c for r in read_csv(ocr_project / "data/split/train.csv") for c in r["text"]}
    assert meta["charset"] == sorted(train_chars) and meta["image_size"] == [32, 192]
    import onnx

    props = {p.key: json.loads(p.value)
             for p in onnx.load(str(ocr_project / "models/model.onnx")).metadata_props}
    assert props["task"] == "ocr" and props["blank"] == 0 and props["charset"] == meta["charset"]
    assert props["image_size"] == [32, 192] and "code_sha256" in props
    export = json.loads((ocr_project / "metrics/export.json").read_text())
    assert export["text_agreement"] == 1.0
    html = (ocr_project / "reports/run.html").read_text()
    assert "Character confusions" in html and "CER distribution" in html


def test_second_repro_does_nothing(ocr_project, tmp_path):
    from tools.project import dvc

    run = copy_run(ocr_project, tmp_path / "again")
    proc = dvc(run, "repro")
    assert "Running stage" not in proc.stdout, proc.stdout


def predict(cwd, *args):
    return run_tool("predict", *args, cwd=cwd)


@pytest.fixture(scope="module")
def test_lines(ocr_project, tmp_path_factory):
    """The test split's images copied to a folder, and evaluate's rows for them."""
    folder = tmp_path_factory.mktemp("lines")
    rows = read_csv(ocr_project / "plots/eval/predictions.csv")[:12]
    for r in rows:
        shutil.copy(ocr_project / "data/sample" / r["path"], folder / r["path"].split("/")[-1])
    return folder, {r["path"].split("/")[-1]: r for r in rows}


def test_predict_decodes_as_evaluate_did(ocr_project, test_lines):
    folder, expected = test_lines
    for backend, model in (("onnxruntime", "model.onnx"), ("torch", "model.pt")):
        out = folder.parent / f"{backend}.jsonl"
        proc = predict(folder, ".", "--backend", backend, "--model",
                       str(ocr_project / "models" / model), "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows) == len(expected)
        for row in rows:
            want = expected[row["path"].split("/")[-1]]
            assert row["text"] == want["predicted"], (backend, row)
            assert row["confidence"] == pytest.approx(float(want["confidence"]), abs=1e-3)
            assert 0 <= row["confidence"] <= 1 and not row["error"]


def test_serve_answers_text_over_http(ocr_project, test_lines, tmp_path):
    folder, expected = test_lines
    with serving(ocr_project / "models/model.onnx", tmp_path) as url:
        names = sorted(expected)[:3]
        files = [("files", (n, (folder / n).read_bytes(), "image/x-portable-graymap"))
                 for n in names]
        answer = httpx.post(f"{url}/predict", files=files, timeout=30)
        assert answer.status_code == 200, answer.text
        got = answer.json()["predictions"]
        assert [p["text"] for p in got] == [expected[n]["predicted"] for n in names]
        assert all(0 <= p["confidence"] <= 1 for p in got)
        card = httpx.get(f"{url}/model").json()
        assert card["task"] == "ocr" and card["input"]["image_size"] == [32, 192]


def test_parity_fails_on_a_perturbed_export_naming_the_line(ocr_project, tmp_path,
                                                           monkeypatch):
    run = copy_run(ocr_project, tmp_path / "perturbed")
    before = (run / "models/model.onnx").read_bytes()
    monkeypatch.setenv("PIPELINE_TEST_EXPORT_MEAN_SHIFT", "0.5")
    proc = run_stage("export", cwd=run)
    assert proc.returncode != 0
    test_paths = [r["path"] for r in read_csv(run / "data/split/test.csv")]
    worst = proc.stderr.split("Worst image: ")[1].split(" ")[0]
    assert worst in test_paths, proc.stderr
    assert "ONNX (onnxruntime) disagrees with PyTorch" in proc.stderr
    assert (run / "models/model.onnx").read_bytes() == before  # no model written


def test_the_int8_reader_is_gated_and_predicts_text(ocr_project, test_lines, tmp_path):
    """export.formats: onnx_int8 for a CTC reader (the predict target of issue 45 is met by the
    int8 model): written behind the CER gate, and tools.predict reads lines with it."""
    from tools.project import set_params

    run = copy_run(ocr_project, tmp_path / "int8")
    set_params(run, {"export.formats": ["onnx", "onnx_int8"]})
    proc = run_stage("export", cwd=run)
    assert proc.returncode == 0, proc.stderr
    m = json.loads((run / "metrics/export.json").read_text())
    assert m["headline"]["metric"] == "cer" and m["headline"]["higher_is_better"] is False
    assert set(m["headline"]["drop"]) == {"onnx", "onnx_int8"}
    assert m["headline"]["drop"]["onnx_int8"] <= m["headline"]["max_drop"]
    int8 = run / "models/int8/model.int8.onnx"
    assert int8.stat().st_size < 0.5 * (run / "models/model.onnx").stat().st_size
    folder, expected = test_lines
    out = tmp_path / "int8.jsonl"
    proc = predict(folder, ".", "--model", str(int8), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["path"].split("/")[-1] for r in rows) == sorted(expected)
    assert all(not r["error"] and isinstance(r["text"], str) and 0 <= r["confidence"] <= 1
               for r in rows)
