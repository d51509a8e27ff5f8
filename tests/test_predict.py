"""predict: inputs, per-file errors, exit codes, restart after SIGKILL, agreement with evaluate."""
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import ROOT, run_tool, write_image
from stages.lib.modality.errors import BadInput
from stages.lib.modality.imageserve import read as read_image
from tools.inference import Model, decode
from tools.predict.inputs import expand, iter_inputs
from tools.predict.rowfile import repair_torn_tail


def rows_of(path):
    with open(path, encoding="utf-8") as f:
        if str(path).endswith(".csv"):
            return list(csv.DictReader(f))
        return [json.loads(line) for line in f]


# --- unit tests (no model) ---------------------------------------------------------------

def test_inputs_from_folders_globs_and_lists_are_sorted_and_skip_hidden(in_tmp):
    for rel in ["d/b/2.png", "d/b/1.png", "d/a.png", "d/.hidden.png", "d/.git/x.png", "e/z.png"]:
        write_image(rel)
    (in_tmp / "list.txt").write_text("# a comment\ne/z.png\n\nd/b\n")
    assert list(expand("d")) == ["d/a.png", "d/b/1.png", "d/b/2.png"]
    assert list(expand("d/**/*.png")) == ["d/a.png", "d/b/1.png", "d/b/2.png"]
    assert list(iter_inputs(["@list.txt", "./e/z.png"])) == [
        "e/z.png", "d/b/1.png", "d/b/2.png", "e/z.png"]


def test_torn_last_line_is_truncated(tmp_path):
    out = tmp_path / "p.jsonl"
    out.write_bytes(b'{"path": "a"}\n{"path": "b"}\n{"path": "c", "lab')
    assert repair_torn_tail(out) == len(b'{"path": "c", "lab')
    assert out.read_bytes() == b'{"path": "a"}\n{"path": "b"}\n'
    assert repair_torn_tail(out) == 0
    out.write_bytes(b'{"path"')
    assert repair_torn_tail(out) == 7 and out.read_bytes() == b""


def test_read_image_names_each_kind_of_bad_file(tmp_path):
    good = write_image(tmp_path / "ok.png", size=(20, 10))
    assert read_image(good, 8, 1).shape == (8, 8, 1)
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    truncated = tmp_path / "cut.png"
    truncated.write_bytes(good.read_bytes()[:60])
    cases = [(text, "unsupported", 10**6), (truncated, "corrupt", 10**6),
             (tmp_path / "missing.png", "unreadable", 10**6), (good, "too_large", 199)]
    for path, kind, max_pixels in cases:
        with pytest.raises(BadInput) as exc:
            read_image(path, 8, 1, max_pixels=max_pixels)  # good has 200 pixels
        assert exc.value.kind == kind, (path, exc.value)


def test_decode_is_sorted_softmax_top_k_starting_with_argmax():
    model = Model("onnxruntime", "m.onnx", meta={"classes": ["a", "b", "c"]}, image_size=8,
                  channels=1, mean=[0.5], std=[0.5], sha256="0" * 64)
    logits = np.array([[0.0, 3.0, 1.0], [2.0, 2.0, -1.0]], dtype=np.float32)
    out = [pred["topk"] for pred in decode(model, logits, 2)]
    assert [[t["label"] for t in row] for row in out] == [["b", "c"], ["a", "b"]]
    assert out[0][0]["score"] == pytest.approx(np.exp(3) / (1 + np.exp(3) + np.exp(1)), abs=1e-6)
    assert out[1][0]["score"] == out[1][1]["score"]  # a tie goes to the lower class index
    assert [(p["label"], p["score"]) for p in decode(model, logits, 2)] == [
        (row[0]["label"], row[0]["score"]) for row in out]  # the best of the top k
    assert [len(p["topk"]) for p in decode(model, logits, 10)] == [3, 3]  # k capped
    assert logits[0, 1] == 3.0  # the model's output is not modified


def test_usage_errors_exit_2_and_missing_model_exits_1(in_tmp):
    write_image("imgs/a.png")
    proc = run_tool("predict", cwd=in_tmp)
    assert proc.returncode == 2, proc.stderr
    proc = run_tool("predict", "no/such/dir", "--model", "m.onnx", cwd=in_tmp)
    assert proc.returncode == 2 and "no/such/dir" in proc.stderr
    proc = run_tool("predict", "imgs", "--model", "missing.onnx", cwd=in_tmp)
    assert proc.returncode == 1 and "missing.onnx not found" in proc.stderr
    assert not (in_tmp / "predictions.jsonl").exists()


def max_pixels_defaults() -> list[int]:
    """The --max-pixels default of predict and of serve, as click resolves it here and now."""
    import click

    from tools.predict.__main__ import main as predict_main
    from tools.serve.__main__ import main as serve_main

    defaults = []
    for command in (predict_main, serve_main):
        (param,) = [p for p in command.params if p.name == "max_pixels"]
        defaults.append(param.get_default(click.Context(command)))
    return defaults


def test_max_pixels_default_is_validate_max_pixels_of_params_yaml(in_tmp, capsys):
    from stages.lib.params import Validate
    from tools.project import set_params

    assert max_pixels_defaults() == [Validate().max_pixels] * 2  # no params.yaml here
    shutil.copy(ROOT / "params.yaml", in_tmp / "params.yaml")
    set_params(in_tmp, {"validate.max_pixels": 1234})
    assert max_pixels_defaults() == [1234, 1234]
    assert capsys.readouterr().err == ""
    set_params(in_tmp, {"validate.max_pixel": 99})  # a misspelt key: the file is not valid
    assert max_pixels_defaults() == [Validate().max_pixels] * 2
    warning = capsys.readouterr().err
    assert "validate.max_pixel" in warning and "--max-pixels defaults to" in warning


# --- with a model trained by the pipeline ------------------------------------------------

@pytest.fixture(scope="module")
def folder(trained_project, tmp_path_factory):
    """The trained project's 200 sample images plus 10 bad files (5% of the good ones)."""
    root = tmp_path_factory.mktemp("predict") / "images"
    shutil.copytree(trained_project / "data/sample", root)
    bad = {"0/notes.pgm": b"plain text, not an image\n", "1/empty.pgm": b"",
           "2/cut.pgm": (root / "2/0002.pgm").read_bytes()[:20]}
    for i in range(3, 8):
        bad[f"{i}/garbage{i}.png"] = bytes(range(256)) * 3
    for rel, data in bad.items():
        (root / rel).write_bytes(data)
    write_image(root / "8/huge.png", size=(400, 300))  # over --max-pixels 100000 below
    write_image(root / "9/wide.png", size=(1000, 101))
    return root, sorted(["8/huge.png", "9/wide.png", *bad])


def predict(cwd, *args, env=None):
    return subprocess.run([sys.executable, "-m", "tools.predict", *args], cwd=cwd,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def model_args(project, backend="onnxruntime"):
    model = project / ("models/model.onnx" if backend == "onnxruntime" else "models/model.pt")
    return ["--model", str(model), "--backend", backend, "--max-pixels", "100000"]


@pytest.mark.e2e
def test_bad_files_get_error_rows_and_predictions_equal_evaluate(trained_project, folder,
                                                                 tmp_path):
    root, bad = folder
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    out = tmp_path / "p.jsonl"
    proc = predict(root, ".", *model_args(trained_project), "--batch-size", "16",
                   "--out", str(out))
    assert proc.returncode == 3, proc.stderr  # documented: some inputs failed
    assert "200 predicted, 10 failed" in proc.stdout
    rows = rows_of(out)
    assert sorted(r["path"] for r in rows) == files  # each input exactly once
    failed = {r["path"]: r["error"] for r in rows if r["error"]}
    assert sorted(failed) == bad
    assert failed["0/notes.pgm"].startswith("unsupported")
    assert failed["2/cut.pgm"].startswith("corrupt")
    assert failed["8/huge.png"].startswith("too_large") and "120000 pixels" in failed["8/huge.png"]
    assert all(r["label"] == "" and r["score"] is None and r["topk"] == [] for r in rows
               if r["error"])
    by_path = {r["path"]: r for r in rows}
    for r in rows:
        if not r["error"]:
            assert r["label"] == r["topk"][0]["label"] and r["score"] == r["topk"][0]["score"]
            assert len(r["topk"]) == 3
    confusion = rows_of(trained_project / "plots/eval/confusion.csv")
    assert len(confusion) > 10
    for c in confusion:  # the evaluate stage's PyTorch predictions on its test split
        assert by_path[c["path"]]["label"] == c["predicted"], c

    # PyTorch eager on model.pt, CSV output inside the folder: same labels, same rows
    csv_out = root / "torch.csv"
    proc = predict(root, ".", *model_args(trained_project, "torch"), "--out", str(csv_out))
    assert proc.returncode == 3, proc.stderr
    torch_rows = rows_of(csv_out)
    csv_out.unlink()
    assert sorted(r["path"] for r in torch_rows) == files  # the output is not an input
    for r in torch_rows:
        assert r["label"] == by_path[r["path"]]["label"]
        assert bool(r["error"]) == bool(by_path[r["path"]]["error"])
        if not r["error"]:
            assert float(r["score"]) == pytest.approx(by_path[r["path"]]["score"], abs=1e-5)
            assert [t["label"] for t in json.loads(r["topk"])] == [
                t["label"] for t in by_path[r["path"]]["topk"]]

    # a second run skips everything; --retry-failed re-runs only the (now fixed) bad files
    proc = predict(root, ".", *model_args(trained_project), "--out", str(out))
    assert proc.returncode == 3 and "0 predicted, 0 failed; 210 already in" in proc.stdout
    fixed = tmp_path / "fixed"
    shutil.copytree(root, fixed)
    for rel in bad:
        shutil.copy(root / "0/0000.pgm", fixed / rel)
    lines_before = out.read_text().splitlines()
    proc = predict(fixed, "--retry-failed", *model_args(trained_project), "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "10 predicted, 0 failed" in proc.stdout
    rows = rows_of(out)
    assert sorted(r["path"] for r in rows) == files and not any(r["error"] for r in rows)
    kept = [line for line in lines_before if '"error": ""' in line]
    assert out.read_text().splitlines()[:len(kept)] == kept  # good rows untouched
    for rel in bad:
        assert by_path["0/0000.pgm"]["topk"] == {r["path"]: r for r in rows}[rel]["topk"]


@pytest.mark.e2e
def test_sigkill_mid_run_then_restart_gives_each_input_once(trained_project, tmp_path):
    images = tmp_path / "images"
    shutil.copytree(trained_project / "data/sample", images)
    files = sorted(str(p.relative_to(tmp_path)) for p in images.rglob("*.pgm"))
    (tmp_path / "list.txt").write_text("\n".join(files) + "\n")
    out = tmp_path / "p.jsonl"
    args = ["@list.txt", *model_args(trained_project), "--batch-size", "4", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "tools.predict", *args], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT),
                                 "PIPELINE_TEST_PREDICT_DELAY_S": "0.05"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while (not out.exists() or out.read_bytes().count(b"\n") < 40) and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    written = out.read_bytes().count(b"\n")
    assert 40 <= written < len(files)
    # a kill can also land mid-write: leave a torn line as such a kill would
    with open(out, "ab") as f:
        f.write(b'{"path": "images/9/torn.pgm", "label": "9", "sco')

    done = predict(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert "repaired a torn last line" in done.stderr
    assert f"{len(files) - written} predicted, 0 failed; {written} already in" in done.stdout
    rows = rows_of(out)
    assert sorted(r["path"] for r in rows) == files  # exactly once each

    clean = tmp_path / "clean.jsonl"
    assert predict(tmp_path, *args[:-1], str(clean)).returncode == 0
    reference = {r["path"]: r for r in rows_of(clean)}
    for r in rows:  # same predictions as a run that was never interrupted
        assert r["label"] == reference[r["path"]]["label"]
        assert r["score"] == pytest.approx(reference[r["path"]]["score"], abs=1e-5)


@pytest.mark.e2e
def test_onnxruntime_path_never_imports_torch(trained_project):
    code = (
        "import sys\n"
        "from stages.lib.modality.imageserve import read as read_image\n"
        "from tools.inference import load, predict_batch\n"
        f"model = load('onnxruntime', {str(trained_project / 'models/model.onnx')!r})\n"
        f"image = read_image({str(trained_project / 'data/sample/3/0003.pgm')!r}, "
        "model.image_size, model.channels)\n"
        "print(predict_batch(model, [image], 2)[0]['label'])\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() in [str(d) for d in range(10)]


@pytest.mark.e2e
def test_default_max_pixels_follows_params_yaml_on_real_files(trained_project, tmp_path):
    """A 45 MP PNG (45 KB on disk) is decoded and predicted with default options where
    params.yaml's validate.max_pixels is 50 MP, and refused from its header where it is 40 MP:
    the tools accept what the pipeline would train on, no more."""
    from tests.corrupt import png_bomb
    from tools.project import set_params

    (tmp_path / "models").mkdir()
    shutil.copy(trained_project / "models/model.onnx", tmp_path / "models/model.onnx")
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    (tmp_path / "big.png").write_bytes(png_bomb(9000, 5000, bits=8))
    runs = {}
    for limit in (50_000_000, 40_000_000):
        set_params(tmp_path, {"validate.max_pixels": limit})
        proc = run_tool("predict", "big.png", "--out", f"{limit}.jsonl", cwd=tmp_path)
        runs[limit] = proc, rows_of(tmp_path / f"{limit}.jsonl")
    proc, [row] = runs[50_000_000]
    assert proc.returncode == 0, proc.stderr
    assert row["error"] == "" and row["label"] in [str(d) for d in range(10)], row
    proc, [row] = runs[40_000_000]
    assert proc.returncode == 3, proc.stderr
    assert row["error"] == ("too_large: image has 9000x5000 = 45000000 pixels, over --max-pixels "
                            "40000000 (default: validate.max_pixels)"), row
