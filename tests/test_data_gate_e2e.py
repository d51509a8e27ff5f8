"""End to end: the corrupted dataset through `dvc repro` in a temp copy of the project.

With `validate.on_error: fail` the pipeline stops at validate naming every bad file; with
`quarantine` it trains on exactly the good files. Input bytes never change. Adding 20% new files
moves no old file to another split.
"""
import csv
import hashlib
import os

import pytest

from tests.conftest import ROOT
from tests.corrupt import NEAR_PAIRS, build, encoded, photo, straddles
from tools.project import copy_project, dvc, set_params

pytestmark = pytest.mark.e2e


def tree_hashes(*roots) -> dict[str, str]:
    """sha256 of every file (symlinks as their target path) under the roots."""
    out = {}
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for name in names:
                path = os.path.join(dirpath, name)
                out[path] = (os.readlink(path) if os.path.islink(path) else
                             hashlib.sha256(open(path, "rb").read()).hexdigest())
    return out


def split_of(root) -> dict[str, str]:
    out = {}
    for name in ("train", "val", "test"):
        with open(root / f"data/split/{name}.csv", newline="") as f:
            out.update({r["path"]: name for r in csv.DictReader(f)})
    return out


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gate")
    root = copy_project(ROOT, tmp / "project", params={
        "data.source": "data/raw", "sample.per_class": 5, "train.epochs": 1,
        "validate.on_error": "fail"})
    bad, good = build(root / "data/raw", outside=tmp / "outside")
    before = tree_hashes(root / "data/raw", tmp / "outside")
    failed = dvc(root, "repro", check=False)
    set_params(root, {"validate.on_error": "quarantine"})
    passed = dvc(root, "repro", "train", check=False)  # evaluate and export add nothing here
    return root, bad, good, before, failed, passed, tmp


def test_fail_stops_at_validate_naming_every_bad_file(gate):
    root, bad, _, _, failed, _, _ = gate
    out = failed.stdout + failed.stderr
    assert failed.returncode != 0
    assert "Running stage 'validate'" in out and "Running stage 'split'" not in out
    missing = [path for path in bad if path not in out]
    assert not missing, out


def test_quarantine_trains_on_exactly_the_good_files(gate):
    root, bad, good, _, _, passed, _ = gate
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Running stage 'train'" in passed.stdout
    with open(root / "data/quarantine.csv", newline="") as f:
        assert {r["path"] for r in csv.DictReader(f)} == set(bad)
    split = split_of(root)
    assert set(split) == good
    for a, b in NEAR_PAIRS:  # each pair would straddle splits on its own hashes
        assert straddles((root / "data/raw" / a).read_bytes(), (root / "data/raw" / b).read_bytes())
        assert split[a] == split[b]
    import json

    meta = json.loads((root / "data/processed/meta.json").read_text())
    assert sum(meta["counts"].values()) == len(good) and meta["classes"] == ["bird", "cat", "dog"]
    assert (root / "models/model.pt").exists()


def test_input_bytes_are_unchanged(gate):
    root, _, _, before, _, _, tmp = gate
    assert tree_hashes(root / "data/raw", tmp / "outside") == before


def test_adding_twenty_percent_new_files_moves_no_old_file(gate):
    root, _, good, _, _, _, _ = gate
    old = split_of(root)
    for i in range(len(good) // 5 + 1):
        label = ("cat", "dog", "bird")[i % 3]
        (root / f"data/raw/{label}/new{i}.png").write_bytes(encoded(photo(700 + i), "PNG"))
    dvc(root, "repro", "split")
    new = split_of(root)
    assert len(new) > len(old)
    assert {p: new[p] for p in old} == old
