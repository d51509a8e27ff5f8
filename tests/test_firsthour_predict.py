"""Issue 17, item 2: predict's rows carry the model version, a restart never mixes models in
one file, `--out -` prints rows (the default for one image file), the summary counts apart."""
import hashlib
import json

import pytest

from tests.conftest import run_tool

pytestmark = pytest.mark.e2e


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rows_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def predict(project, *args):
    return run_tool("predict", *args, cwd=project)


def other_model(project, dest):
    """models/model.pt with one weight changed: another model version."""
    import torch

    from stages.lib.model.models import save_model

    blob = torch.load(project / "models/model.pt", map_location="cpu", weights_only=True)
    key = next(k for k, v in blob["state_dict"].items() if v.is_floating_point())
    blob["state_dict"][key] = blob["state_dict"][key] + 0.01
    model = torch.nn.Module()
    model.state_dict = lambda: blob["state_dict"]
    save_model(dest, model, blob["meta"])
    return dest


def test_rows_carry_the_model_version_and_a_restart_never_mixes_models(own_data_project,
                                                                        tmp_path):
    version = sha256(own_data_project / "models/model.pt")[:12]  # issue 41, item 10
    out = tmp_path / "p.jsonl"
    proc = predict(own_data_project, "data/mine", "--out", str(out))
    assert proc.returncode == 3, proc.stderr  # data/mine/blue/broken.png
    assert "predict: 90 predicted, 1 failed; 0 already in" in proc.stdout
    rows = rows_of(out)
    assert len(rows) == 91 and {r["model"] for r in rows} == {version}
    # the torch backend on model.pt: the same version
    torch_out = tmp_path / "t.jsonl"
    predict(own_data_project, "data/mine", "--backend", "torch", "--out", str(torch_out))
    assert {r["model"] for r in rows_of(torch_out)} == {version}

    # the same model again: nothing to do
    proc = predict(own_data_project, "data/mine", "--out", str(out))
    assert "0 predicted, 0 failed; 91 already in" in proc.stdout

    # another model on the same file: refused, naming both versions; the file is untouched
    other = other_model(own_data_project, tmp_path / "other.pt")
    before = out.read_bytes()
    proc = predict(own_data_project, "data/mine", "--backend", "torch", "--model", str(other),
                   "--out", str(out))
    assert proc.returncode == 1
    error = proc.stderr.strip()
    assert error.startswith("Error: ") and "Traceback" not in proc.stderr
    assert f"holds predictions of model {version}" in error
    assert f"this model is {sha256(other)[:12]}" in error and "--overwrite" in error
    assert out.read_bytes() == before

    # --overwrite: every row is the new model's
    proc = predict(own_data_project, "data/mine", "--backend", "torch", "--model", str(other),
                   "--out", str(out), "--overwrite")
    assert "90 predicted, 1 failed; 0 already in" in proc.stdout
    assert {r["model"] for r in rows_of(out)} == {sha256(other)[:12]}
    assert len(rows_of(out)) == 91


def test_rows_without_a_version_are_refused_until_overwritten(own_data_project, tmp_path):
    out = tmp_path / "old.jsonl"
    out.write_text(json.dumps({"path": "data/mine/red/red_000.jpg", "label": "red",
                               "score": 0.9, "topk": [], "error": ""}) + "\n")
    proc = predict(own_data_project, "data/mine/red", "--out", str(out))
    assert proc.returncode == 1 and "predict did not record" in proc.stderr
    proc = predict(own_data_project, "data/mine/red", "--out", str(out), "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert len(rows_of(out)) == 30 and all(r["model"] for r in rows_of(out))


def test_one_image_prints_one_line_and_writes_no_file(own_data_project):
    image = own_data_project / "data/mine/green/green_003.png"
    proc = predict(own_data_project, "data/mine/green/green_003.png")
    assert proc.returncode == 0, proc.stderr
    [line] = proc.stdout.splitlines()
    row = json.loads(line)
    assert row["path"] == "data/mine/green/green_003.png" and row["label"] == "green"
    assert row["model"] == sha256(own_data_project / "models/model.pt")[:12]
    assert not (own_data_project / "predictions.jsonl").exists()
    assert image.is_file()
    # a folder to stdout, as CSV: a header and one line per image
    proc = predict(own_data_project, "data/mine/red", "--out", "-", "--format", "csv")
    lines = proc.stdout.splitlines()
    assert lines[0] == "path,label,score,topk,error,model" and len(lines) == 31
    proc = predict(own_data_project, "data/mine/red/red_000.jpg", "--out", "-",
                   "--retry-failed")
    assert proc.returncode == 2 and "--retry-failed needs an --out file" in proc.stderr
