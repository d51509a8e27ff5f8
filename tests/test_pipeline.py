"""End to end: `dvc repro` in a temp copy of the project on a reduced config.

The tests run in file order and share one copy of the session's tiny run (conftest's
trained_project, which checks that its first `dvc repro` ran every stage): its outputs, a
no-op rerun, forced reruns, a param change, an experiment.
"""
import csv
import json
import re

import pytest

from tests.conftest import TINY_RUN, copy_run, measured
from tools.project import STAGES_BEFORE_TRAIN, dvc, git, lock_hashes, set_params

pytestmark = pytest.mark.e2e


def ran(proc) -> list[str]:
    return re.findall(r"Running stage '([^']+)'", proc.stdout)


@pytest.fixture(scope="module")
def repo(trained_project, tmp_path_factory):
    """A copy of the shared tiny run (every stage ran once, committed)."""
    return copy_run(trained_project, tmp_path_factory.mktemp("e2e") / "project")


def test_outputs_and_metrics(repo):
    with open(repo / "data/manifest.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 10 * TINY_RUN["sample.per_class"]
    tests = len((repo / "data/split/test.csv").read_text().splitlines()) - 1
    ev = json.loads((repo / "metrics/eval.json").read_text())
    ex = json.loads((repo / "metrics/export.json").read_text())
    assert ev["samples"] == tests and 0 < ev["accuracy"] <= 1
    assert ex["samples"] == tests and ex["parity"] == "passed"
    assert measured(repo)["max_abs_diff"] <= ex["atol"]
    assert (repo / "models/model.onnx").stat().st_size > 1000
    history = (repo / "plots/train/plots/metrics/val/acc.tsv").read_text().splitlines()
    assert history[0] == "step\tacc"  # no timestamps
    assert len(history) == 1 + TINY_RUN["train.epochs"]
    assert "/tmp" not in (repo / "dvc.lock").read_text()


def test_second_repro_does_nothing_and_status_is_clean(repo):
    proc = dvc(repo, "repro")
    assert ran(proc) == []
    assert "up to date" in dvc(repo, "status").stdout


def test_forced_reruns_give_identical_hashes(repo):
    before = lock_hashes(repo)
    dvc(repo, "repro", "--force")
    assert lock_hashes(repo) == before
    assert git(repo, "status", "--porcelain") == ""


def test_lr_change_reruns_only_train_and_after(repo):
    set_params(repo, {"train.lr": 0.01})
    proc = dvc(repo, "repro")
    assert ran(proc) == ["train", "evaluate", "export", "report"]
    before = {k: v for k, v in lock_hashes(repo).items() if k[0] in STAGES_BEFORE_TRAIN}
    assert before == {k: v for k, v in lock_hashes(repo).items() if k in before}
    git(repo, "commit", "-qam", "lr 0.01")


def test_experiment_is_listed_beside_the_baseline(repo):
    dvc(repo, "exp", "run", "-S", "train.lr=0.002", "-n", "slow-lr")
    rows = list(csv.DictReader(dvc(repo, "exp", "show", "--csv").stdout.splitlines()))
    by_name = {r["Experiment"] or r["rev"]: r for r in rows}
    assert "slow-lr" in by_name
    assert float(by_name["slow-lr"]["train.lr"]) == 0.002
    assert float(by_name["slow-lr"]["accuracy"]) > 0
    assert any(float(r["train.lr"]) == 0.01 for r in rows if r["Experiment"] != "slow-lr")


def test_misspelt_param_fails_the_stage_naming_the_key(repo):
    set_params(repo, {"train.lr_rate": 0.1})
    proc = dvc(repo, "repro", check=False)
    assert proc.returncode != 0
    assert "train.lr_rate" in proc.stdout + proc.stderr
    git(repo, "checkout", "params.yaml")
