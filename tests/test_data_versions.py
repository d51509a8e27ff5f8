"""Issue 39, item 7: data versions (docs/registry.md, "Data versions").

A dataset repository (`dvc add data/digits`, a directory remote) registers the dataset v1.0.0
and, after 10 files added and 2 removed, v2.0.0 (`python -m tools.registry register`, type
dataset); its git is pushed to a bare repository. A project imports v1.0.0 with
`dvc import BARE data/digits --rev digits@v1.0.0`, runs ingest, validate and split, then moves
to v2.0.0 with `dvc update --rev digits@v2.0.0`: ingest and validate name the 10 and the 2, no
old file changes split, and dvc.lock stays reproducible.
"""
import csv
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_module, write_image
from tools.project import copy_project, dvc, git

pytestmark = pytest.mark.e2e

CLASSES = ("a", "b", "c")
REMOVED = ["a/img00.png", "b/img00.png"]
ADDED = [f"{c}/img{i:02d}.png" for c, n in (("a", 4), ("b", 3), ("c", 3))
         for i in range(10, 10 + n)]
ARTIFACTS = "artifacts:\n  digits:\n    type: dataset\n    path: data/digits\n    desc: digits\n"


def commit_all(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)


def registry(*args, cwd):
    proc = run_module("tools.registry", *args, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def image(path: Path) -> None:
    seed = sum(ord(ch) * 31 ** i for i, ch in enumerate(path.as_posix()[-12:])) % 2**31
    write_image(path, size=(16, 16), seed=seed)


def splits(repo: Path) -> dict:
    """{path: split} of data/split/*.csv."""
    found = {}
    for name in ("train", "val", "test"):
        with open(repo / f"data/split/{name}.csv", newline="") as f:
            found.update({row["path"]: name for row in csv.DictReader(f)})
    return found


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """The dataset repository: v1.0.0 (30 images), v2.0.0 (38: 10 added, 2 removed), pushed."""
    base = tmp_path_factory.mktemp("data-versions")
    repo = base / "digits"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.name", "pipeline")
    git(repo, "config", "user.email", "pipeline@localhost")
    dvc(repo, "init", "-q")
    (base / "store").mkdir()
    dvc(repo, "remote", "add", "-d", "store", str(base / "store"))
    (repo / "dvc.yaml").write_text(ARTIFACTS)
    for c in CLASSES:
        for i in range(10):
            image(repo / f"data/digits/{c}/img{i:02d}.png")
    dvc(repo, "add", "-q", "data/digits")
    commit_all(repo, "digits: 30 images")
    dvc(repo, "push", "-q")
    assert "registered digits@v1.0.0" in registry("register", "digits", "v1.0.0", cwd=repo).stdout
    for rel in REMOVED:
        (repo / "data/digits" / rel).unlink()
    for rel in ADDED:
        image(repo / "data/digits" / rel)
    dvc(repo, "add", "-q", "data/digits")
    commit_all(repo, "digits: 10 added, 2 removed")
    dvc(repo, "push", "-q")
    registry("register", "digits", "v2.0.0", cwd=repo)
    proc = run_module("gto.cli", "assign", "digits", "--version", "v2.0.0", "--stage", "prod",
                      cwd=repo)
    assert proc.returncode == 0, proc.stderr
    git(base, "init", "-q", "--bare", "digits.git")
    git(repo, "push", "-q", str(base / "digits.git"), "HEAD", "--tags")
    return repo, base / "digits.git"


def test_a_dataset_version_carries_its_md5_and_the_commit_shows_it(dataset):
    from stages.lib.model.provenance import registry_state

    repo, _ = dataset
    message = git(repo, "tag", "-n9", "digits@v2.0.0")
    assert "digits v2.0.0: 38 files" in message and "data: " in message
    assert registry_state(repo) == [{"artifact": "digits", "version": "v2.0.0",
                                     "stages": ["prod"]}]


def test_import_then_update_names_what_changed_and_keeps_old_files_split(dataset, tmp_path,
                                                                         monkeypatch):
    from stages.lib.data.changes import dataset_version

    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    _, origin = dataset
    project = copy_project(ROOT, tmp_path / "project", params={
        "data.source": "data/digits", "sample.per_class": 1})
    dvc(project, "import", "-q", str(origin), "data/digits", "--rev", "digits@v1.0.0",
        "-o", "data/digits")
    commit_all(project, "digits v1.0.0")
    first = dvc(project, "repro", "split").stdout
    assert "validate: changes: no earlier run to compare with" in first, first
    assert "ingest: data/digits is digits@v1.0.0 of " in first
    commit_all(project, "split of digits v1.0.0")
    before = splits(project)
    assert len(before) == 30

    dvc(project, "update", "-q", "--rev", "digits@v2.0.0", "data/digits.dvc")
    proc = dvc(project, "repro", "split")
    out = proc.stdout
    for stage in ("ingest", "validate"):
        assert re.search(rf"{stage}: since the last run \(manifest [0-9a-f]{{12}}\): 10 added, "
                         rf"2 removed, 0 changed", out), out
        added = re.search(rf"{stage}:   added: (.*)", out).group(1).split(", ")
        removed = re.search(rf"{stage}:   removed: (.*)", out).group(1).split(", ")
        assert added == sorted(ADDED) and removed == REMOVED
    assert "ingest: data/digits is digits@v2.0.0 of " in out
    assert dataset_version(project / "data/digits")["rev"] == "digits@v2.0.0"
    after = splits(project)
    assert len(after) == 38
    moved = {p for p in before if p in after and before[p] != after[p]}
    assert not moved, moved  # every old file where it was
    commit_all(project, "split of digits v2.0.0")
    # the changes are a run record, not an out: a forced re-run writes the same dvc.lock
    proc = dvc(project, "repro", "-f", "split")
    assert "validate: since the last run" in proc.stdout and "0 added, 0 removed, 0 changed" \
        in proc.stdout
    assert git(project, "status", "--porcelain") == ""


def test_the_experiments_page_rows_name_the_dataset_and_the_registered_versions():
    from stages.report.sections import registry_rows

    assert registry_rows(None) == []  # run.html: a DVC out holds no git facts
    rows = "".join(registry_rows({
        "registry": [{"artifact": "pipelines/ocr:ocr", "version": "v0.2.0", "stages": ["prod"]}],
        "dataset": {"name": "data/digits", "rev": "digits@v2.0.0", "commit": "0123456789ab",
                    "url": "/srv/digits.git"}}))
    assert "pipelines/ocr:ocr v0.2.0</code> <span class=\"badge ok\">prod</span>" in rows
    assert 'data-key="dataset.rev">digits@v2.0.0</code>' in rows and "/srv/digits.git" in rows
    assert "this commit is no registered version" in "".join(
        registry_rows({"registry": [], "dataset": {}}))
