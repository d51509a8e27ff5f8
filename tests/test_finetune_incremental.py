"""Issue 15: training on grown data from the previous model. The stable hash split keeps the
old test set; train starts from the previous model.pt (a DVC dep: `dvc add`ed weights); evaluate
scores the old and the new model on the same test set side by side."""
import json

import pytest

from stages.lib.io import read_csv
from tests.conftest import copy_run
from tools.project import dvc, set_params

pytestmark = pytest.mark.e2e


def test_grown_data_keeps_the_old_test_set(incremental_project):
    old, new = incremental_project
    old_test = {r["path"]: r for r in read_csv(old / "data/split/test.csv")}
    new_test = {r["path"]: r for r in read_csv(new / "data/split/test.csv")}
    assert len(read_csv(new / "data/manifest.csv")) == 240  # 200 images + 20%
    assert old_test and set(old_test) <= set(new_test)  # no old test image left the test set
    old_sha = {r["path"]: r["sha256"] for r in read_csv(old / "data/manifest.csv")}
    new_sha = {r["path"]: r["sha256"] for r in read_csv(new / "data/manifest.csv")}
    assert all(old_sha[p] == new_sha[p] for p in old_test)  # the same files, byte for byte
    for split in ("train", "val"):  # nor did an old train or val image move into test
        assert not {r["path"] for r in read_csv(old / f"data/split/{split}.csv")} & (
            set(new_test) - set(old_test))


def test_new_model_starts_from_the_old_and_is_scored_beside_it(incremental_project):
    old, new = incremental_project
    train = json.loads((new / "metrics/train.json").read_text())
    assert train["init"]["from"] == "weights/v1.pt" and train["init"]["kind"] == "model.pt"
    assert train["init"]["reinitialised"] == train["init"]["missing"] == []
    assert train["init"]["loaded"] > 0 and train["params_trainable"] == train["params_total"]
    metrics = json.loads((new / "metrics/eval.json").read_text())
    before = json.loads((old / "metrics/eval.json").read_text())
    side = metrics["compare_with"]
    assert side["model"] == "weights/v1.pt"
    assert side["samples"] == metrics["samples"] > before["samples"]  # the same, grown test set
    assert set(side) - {"model"} == set(metrics) - {"compare_with"}
    report = (new / "reports/run.html").read_text()
    assert "weights/v1.pt" in report and "compare-with" in report


def test_a_new_weights_file_reruns_training(incremental_project, tmp_path):
    _, new = incremental_project
    project = copy_run(new, tmp_path / "project")
    assert "Data and pipelines are up to date" in dvc(project, "status").stdout
    (project / "weights/v1.pt").unlink()
    import shutil

    shutil.copy2(project / "models/model.pt", project / "weights/v1.pt")  # other bytes
    status = dvc(project, "status", "train").stdout
    assert "modified:" in status and "weights/v1.pt" in status
    set_params(project, {"train.init_from": "weights/none"})
    status = dvc(project, "status", "train").stdout  # back to random init: the placeholder
    assert "weights/none" in status and "modified:           train" in status
