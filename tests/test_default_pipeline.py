"""The default pipeline on the full built-in sample, as the README's first command runs it."""
import json

import pytest

from tests.conftest import ROOT, run_tool, venv_elsewhere
from tools.project import STAGES_BEFORE_TRAIN, dvc, git, lock_hashes

pytestmark = pytest.mark.e2e


def test_default_pipeline_is_accurate_and_reproduces_the_committed_lock(project, tmp_path):
    """The README's first command in a fresh clone, at another path than the checkout that
    wrote the committed dvc.lock and with the venv at another path too, leaves dvc.lock
    unchanged: every out is bit-identical, train's and after included, on any x86-64 CPU with
    AVX2 (train.kernels: portable), whichever kind of CPU wrote the lock."""
    from stages.lib.train.kernels import unsupported

    dvc(project, "repro", python=venv_elsewhere(tmp_path / "venv-elsewhere"))
    accuracy = json.loads((project / "metrics/eval.json").read_text())["accuracy"]
    assert accuracy >= 0.95
    committed, got = lock_hashes(ROOT), lock_hashes(project)
    assert set(got) == set(committed)
    before_train = [k for k in committed if k[0] in STAGES_BEFORE_TRAIN]
    assert before_train and all(got[k] == committed[k] for k in before_train), \
        {k: (committed[k], got[k]) for k in before_train if got[k] != committed[k]}
    differ = {k: (committed[k], got[k]) for k in committed if got[k] != committed[k]}
    if unsupported():  # not x86-64 with AVX2: the portable kernels cannot run here
        pytest.skip(f"{unsupported()}: {len(differ)} outs from train on not compared")
    assert not differ, f"outs that differ from the committed dvc.lock (committed, got): {differ}"
    # ... and so does everything else in it (deps, params): `git status` shows it unchanged.
    assert git(project, "status", "--porcelain", "--", "dvc.lock") == "", \
        git(project, "diff", "--", "dvc.lock")[:4000]


def test_smoke_command_runs_the_pipeline_in_a_temp_copy():
    proc = run_tool("smoke", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("smoke: OK"), proc.stdout
