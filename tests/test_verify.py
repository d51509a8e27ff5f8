"""verify: re-run a committed tiny project in a clean clone and compare it with its dvc.lock."""
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from stages.lib.project import (STAGES_BEFORE_TRAIN, copy_project, dvc, git, lock_hashes,
                                 set_params)
from stages.verify import DIFFERENT, IDENTICAL, WITHIN_TOL, metrics_close, upstream, verdict
from tests.conftest import ROOT


def verify(cwd, *args):
    return subprocess.run([sys.executable, "-m", "stages.verify", *args], cwd=cwd,
                          capture_output=True, text=True)


def rows(proc) -> dict[str, str]:
    """{out: verdict} from verify's table."""
    found = {}
    for line in proc.stdout.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 5 and cells[0] != "stage" and not cells[0].startswith("-"):
            found[cells[1]] = cells[4]
    return found


def test_metrics_close_uses_the_tolerance_and_the_keys():
    assert metrics_close({"acc": 0.9, "n": 10}, {"acc": 0.9 + 1e-9, "n": 10}, 1e-6)
    assert not metrics_close({"acc": 0.9}, {"acc": 0.91}, 1e-6)
    assert not metrics_close({"acc": 0.9}, {"acc": 0.9, "loss": 1.0}, 1e-6)
    assert not metrics_close({"model": "a"}, {"model": "b"}, 1.0)


def test_verdict_tells_noise_from_a_change(tmp_path):
    dvc_yaml = {"stages": {"train": {"metrics": [{"metrics/train.json": {"cache": False}}]},
                           "sample": {}}}
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics/train.json").write_text('{"loss": 0.5000001}')
    committed = {"metrics/train.json": {"loss": 0.5}}
    assert verdict("train", "a", "a", dvc_yaml, committed, tmp_path, 1e-6) == IDENTICAL
    assert verdict("train", "a", "b", dvc_yaml, committed, tmp_path, 1e-6) == WITHIN_TOL
    assert verdict("train", "a", "b", dvc_yaml, committed, tmp_path, 1e-9) == DIFFERENT
    assert verdict("sample", "a", "b", dvc_yaml, committed, tmp_path, 1.0) == DIFFERENT


def test_upstream_follows_the_outs_each_stage_reads():
    lock = yaml.safe_load((ROOT / "dvc.lock").read_text())
    dvc_yaml = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    assert upstream(dvc_yaml, lock, ["prepare"]) == set(STAGES_BEFORE_TRAIN)
    assert "evaluate" not in upstream(dvc_yaml, lock, ["train"])
    assert {"train", "prepare", "sample"} <= upstream(dvc_yaml, lock, ["train"])


def test_unknown_rev_is_a_clear_error():
    proc = verify(ROOT, "--rev", "no-such-branch-xyz")
    assert proc.returncode != 0
    assert "--rev no-such-branch-xyz is not a commit" in proc.stderr


@pytest.mark.e2e
def test_committed_lock_reproduces_bit_identically_before_train():
    """The acceptance claim on this project's own committed dvc.lock (default params)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    proc = verify(ROOT, "--stages", "prepare")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = rows(proc)
    assert set(found.values()) == {IDENTICAL}
    assert {"data/sample", "data/manifest.csv", "data/split", "data/processed"} <= set(found)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = copy_project(ROOT, tmp_path_factory.mktemp("verify") / "project",
                        params={"sample.per_class": 20, "train.epochs": 1})
    dvc(root, "repro")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "tiny run")
    return root


@pytest.mark.e2e
def test_clean_commit_reproduces_every_out_bit_identically(tiny):
    proc = verify(tiny)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = rows(proc)
    outs = {out for (_, out) in lock_hashes(tiny)}
    assert set(found) == outs and "models/model.onnx" in found
    assert set(found.values()) == {IDENTICAL}


@pytest.mark.e2e
def test_param_committed_without_rerun_fails_naming_the_model(tiny):
    # params.yaml now says lr 0.05 but dvc.lock still holds the model trained with the default.
    set_params(tiny, {"train.lr": 0.05})
    git(tiny, "commit", "-qam", "lr changed, pipeline not re-run")
    proc = verify(tiny, "--stages", "train")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = rows(proc)
    assert found["models/model.pt"] == DIFFERENT
    assert found["data/processed"] == IDENTICAL  # upstream still matches
    assert "evaluate" not in proc.stdout  # only train and what it depends on
    assert "not identical: " in proc.stdout and "models/model.pt" in proc.stdout.splitlines()[-1]


@pytest.mark.e2e
def test_dvc_added_inputs_come_from_the_cache_or_with_pull_from_the_remote(tiny, tmp_path):
    shutil.copytree(tiny / "data/sample", tiny / "data/raw")
    dvc(tiny, "add", "data/raw")
    set_params(tiny, {"data.source": "data/raw"})
    dvc(tiny, "repro", "ingest")
    dvc(tiny, "remote", "add", "-d", "shared", str(tmp_path / "store"))
    dvc(tiny, "push", "data/raw.dvc")
    git(tiny, "add", "-A")
    git(tiny, "commit", "-qm", "own data in data/raw")
    for args in ([], ["--pull"]):
        proc = verify(tiny, "--stages", "ingest", *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert rows(proc) == {"data/manifest.csv": IDENTICAL}
    shutil.rmtree(tmp_path / "store")
    proc = verify(tiny, "--stages", "ingest", "--pull")
    assert proc.returncode == 1
    assert "does not exist" in proc.stderr and "fix: mkdir -p" in proc.stderr
