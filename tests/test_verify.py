"""verify: re-run a committed tiny project in a clean clone and compare it with its dvc.lock."""
import re
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT
from tools.project import STAGES_BEFORE_TRAIN
from tools.verify import DIFFERENT, IDENTICAL, WITHIN_TOL, metrics_close, upstream, verdict


def verify(cwd, *args):
    return subprocess.run([sys.executable, "-m", "tools.verify", *args], cwd=cwd,
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


def test_a_stage_dvc_did_not_run_is_never_called_identical(tmp_path):
    from tools.verify import NOT_RUN, compare

    committed = {("sample", "data/sample"): "a", ("train", "models/model.pt"): "b"}
    rows = compare(committed, committed, {"stages": {}}, {}, tmp_path, 1e-6, {"sample"})
    assert [r["verdict"] for r in rows] == [IDENTICAL, NOT_RUN]
    only = compare(committed, committed, {"stages": {}}, {}, tmp_path, 1e-6, {"sample"},
                   {"sample"})
    assert [r["out"] for r in only] == ["data/sample"]


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
