"""Issue 17, item 4: an experiment travels to another clone, with its model, by the flow of
docs/machines.md: one bare git remote, one DVC directory remote, an experiment made before the
remote."""
import hashlib
import json
import subprocess

import pytest

from tests.conftest import copy_run, run_tool
from tools.project import dvc, git

pytestmark = pytest.mark.e2e


def test_an_experiment_made_before_the_remote_reaches_a_second_clone(own_data_project,
                                                                      tmp_path):
    a = copy_run(own_data_project, tmp_path / "a")
    bare, store = tmp_path / "team.git", tmp_path / "dvc-store"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)

    # machine A: an experiment, then (only then) the remotes, as in docs/machines.md
    dvc(a, "exp", "run", "-n", "short", "-S", "train.epochs=2")
    exp_model = json.loads((a / "metrics/train.json").read_text())
    exp_weights = hashlib.sha256((a / "models/model.pt").read_bytes()).hexdigest()
    git(a, "checkout", "--", ".")  # back to the committed baseline
    dvc(a, "checkout", "--force")
    git(a, "remote", "add", "team", str(bare))
    dvc(a, "remote", "add", "-d", "shared", str(store))
    git(a, "add", ".dvc/config")
    git(a, "commit", "-qm", "DVC remote")
    git(a, "push", "-q", "team", "HEAD:refs/heads/main")
    dvc(a, "push")
    # the experiment's commit predates the remote: define it in config.local too, which every
    # commit sees (without it: "remote 'shared' doesn't exist", and the model stays behind)
    dvc(a, "remote", "add", "--local", "shared", str(store))
    dvc(a, "exp", "push", "team", "short", "-r", "shared")

    # machine B: a clone, the experiment pulled and applied, runnable
    b = tmp_path / "b"
    subprocess.run(["git", "clone", "-q", "-b", "main", str(bare), str(b)], check=True)
    dvc(b, "remote", "add", "--local", "shared", str(store))
    dvc(b, "exp", "pull", "origin", "short", "-r", "shared")
    dvc(b, "exp", "apply", "short")
    git(b, "checkout", "HEAD", "--", ".dvc/config")  # keep the remote the clone knows
    dvc(b, "pull")
    assert "up to date" in dvc(b, "status").stdout
    assert "epochs: 2" in (b / "params.yaml").read_text()
    assert json.loads((b / "metrics/train.json").read_text()) == exp_model
    image = own_data_project / "data/mine/red/red_005.png"
    proc = run_tool("predict", str(image), cwd=b)  # with B's model
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model"] == exp_weights[:12]  # the experiment's version
