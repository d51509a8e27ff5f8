"""Two queued experiments run at once (`dvc queue start -j 2`) do not clobber each other."""
import csv
import json
import time

import pytest

from tests.conftest import ROOT
from tools.project import copy_project, dvc, git

pytestmark = pytest.mark.e2e


def test_two_queued_experiments_run_at_once_without_clobbering(tmp_path):
    # one thread per process: three processes (one under torchrun with two) share 2 cores
    root = copy_project(ROOT, tmp_path / "project",
                        params={"sample.per_class": 10, "train.epochs": 2, "train.threads": 1})
    dvc(root, "repro")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "baseline")
    # one of them under torchrun: its rendezvous port and temp dir must not collide either
    dvc(root, "exp", "run", "--queue", "-S", "train.lr=0.01", "-n", "lr-high")
    dvc(root, "exp", "run", "--queue", "-S", "train.lr=0.001", "-S", "train.nproc=2",
        "-n", "lr-low-ddp")
    dvc(root, "queue", "start", "-j", "2")
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            status = dvc(root, "queue", "status").stdout
            if "Queued" not in status and "Running" not in status:
                break
            time.sleep(3)
    finally:  # no worker outlives the test, even one idling on an empty queue
        dvc(root, "queue", "stop", "--kill", check=False)
    assert status.count("Success") == 2, status + dvc(root, "queue", "logs", "lr-low-ddp",
                                                       check=False).stdout
    rows = {r["Experiment"]: r for r in csv.DictReader(
        dvc(root, "exp", "show", "--csv").stdout.splitlines()) if r["Experiment"]}
    assert float(rows["lr-high"]["train.lr"]) == 0.01
    assert float(rows["lr-low-ddp"]["train.lr"]) == 0.001
    assert rows["lr-high"]["val_loss"] != rows["lr-low-ddp"]["val_loss"]
    for name in ("lr-high", "lr-low-ddp"):  # each result holds its own params' history
        dvc(root, "exp", "apply", name)
        metrics = json.loads((root / "metrics/train.json").read_text())
        assert metrics["epochs"] == 2
        assert float(rows[name]["val_loss"]) == pytest.approx(metrics["val_loss"])
