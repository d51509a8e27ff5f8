"""Issue 29, acceptance: `tools.init` on a dataset in each layout it reads, then `dvc repro`.

For every layout (tests/layouts.py: ImageFolder, labels.csv, YOLO, COCO, masks, nnU-Net, an
OCR line list) init runs in a fresh project copy and must name the layout, choose the split
mode (given where the data has its own split, a missing test or val carved from train) and fit
prepare's settings to the data; then `dvc repro` runs every stage on a tiny budget (1 epoch,
a 2-image built-in sample): data/processed/meta.json must hold the fitted settings, the split
the chosen mode, and the model must be evaluated (the task's headline metric), exported with
parity passed and reported. The data is hashed before and after: neither init nor the pipeline
touches it. A user who changes only data.source in the committed params.yaml gets settings
from their data too.

A task's second layout (labels.csv, COCO, nnU-Net) runs the pipeline up to prepare: what a
layout changes ends there (the manifest, the split, the prepared shards), and its task's first
layout runs the stages after it on the same code."""
import hashlib
import json
import re
from pathlib import Path

import pytest
import yaml

from stages.lib.io import read_csv
from tests.conftest import ROOT, run_tool
from tests.layouts import LAYOUTS, imagefolder
from tools.project import copy_project, dvc, git
from tools.params_text import edit

# the layouts whose task's first layout already trains, evaluates, exports and reports
UP_TO_PREPARE = ("labels_csv", "coco", "nnunet")
TINY = {"train.epochs": 1,
        "train.warmup_epochs": 0, "train.batch_size": 4, "evaluate.bad_cases": 2,
        "split.test": 0.3}


def snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def project_with(tmp_path, writer) -> tuple[Path, dict]:
    """A committed project copy holding the dataset at data/mine (neither git nor DVC tracks
    it yet: init suggests `dvc add`)."""
    project = copy_project(ROOT, tmp_path / "project")
    return project, writer(project / "data/mine")


def split_paths(project) -> dict:
    return {name: {line.split(",")[0] for line in
                   (project / f"data/split/{name}.csv").read_text().splitlines()[1:]}
            for name in ("train", "val", "test")}


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_init_fits_each_layout_and_the_pipeline_runs(tmp_path, name):
    from stages.tasks import get

    project, expected = project_with(tmp_path, LAYOUTS[name])
    data = project / "data/mine"
    before = snapshot(data)
    proc = run_tool("init", "--task", expected["task"], "--source", "data/mine", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"found: {expected['layout']}" in out, out
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert params["task"] == expected["task"] and params["data"]["source"] == "data/mine"
    assert params["split"]["by"] == expected["by"]
    for key, value in expected["prepare"].items():
        assert params["prepare"][key] == value, (key, out)
        assert re.search(rf"^  prepare\.{key}: .*\(fitted: ", out, re.M), (key, out)
    task = get(expected["task"])
    for dotted, value in task.recipe.items():
        section, key = dotted.split(".")
        assert params[section][key] == value, dotted
    for key, _ in task.revisit:
        assert f"\n  {key}: " in out.split("revisit for")[1]
    for name_ in expected.get("carved", []):
        assert f"split.{name_} (0.15) of train as {name_}" in out, out
    assert "version it: dvc add data/mine && git add data/mine.dvc data/.gitignore" in out
    assert "# images are resized to image_size" in (project / "params.yaml").read_text()

    text = edit((project / "params.yaml").read_text(), TINY)
    (project / "params.yaml").write_text(text)
    git(project, "commit", "-qam", "init + a tiny budget")
    repro = dvc(project, "repro", *(["prepare"] if name in UP_TO_PREPARE else []))
    assert snapshot(data) == before  # nothing rewritten, added or deleted

    meta = json.loads((project / "data/processed/meta.json").read_text())
    shape = expected["prepare"]
    size = [shape["height"], shape["width"]] if "height" in shape else shape["image_size"]
    assert (meta["image_size"], meta["channels"]) == (size, shape["channels"])
    if shape.get("mean") == "auto":
        assert len(meta["mean"]) == shape["channels"] and meta["mean"] != [0.5] * len(meta["mean"])
    splits = split_paths(project)
    assert all(splits.values()), splits
    metrics = json.loads((project / "metrics/split.json").read_text())
    if expected["by"] == "given":  # the data's own splits kept whole, the missing ones
        # carved from its train split (YOLO: train/ and val/ only, test from train/)
        own = {r["path"]: r["split"] for r in read_csv(project / "data/manifest.csv")}
        assert sorted(metrics["carved"]) == sorted(expected["carved"])
        given = {name: {p for p, s in own.items() if s == name} for name in splits}
        for split, paths in splits.items():
            if split == "train":  # what is left of it
                paths = paths.union(*(splits[c] for c in expected["carved"]))
            if split not in expected["carved"]:
                assert paths == given[split], split
        assert all(splits[c] and splits[c] < given["train"] for c in expected["carved"])
        for carved in expected["carved"]:
            assert f"the data has no {carved} split of its own" in repro.stdout
    if name in UP_TO_PREPARE:
        assert "Running stage 'train'" not in repro.stdout
        return
    assert (project / "models/model.onnx").is_file()
    headline = json.loads((project / "metrics/eval.json").read_text())
    assert task.headline_metric in headline
    assert json.loads((project / "metrics/export.json").read_text())["parity"] == "passed"
    assert "Running stage 'report'" in repro.stdout


@pytest.mark.e2e
def test_only_data_source_changed_prepares_own_rgb_data_at_its_own_size(tmp_path):
    """The committed params.yaml with nothing but data.source changed: 48x48 RGB data is
    prepared at 3 channels and 48 px (not the digits' 16 px grey), nothing else to set."""
    project, _ = project_with(tmp_path, imagefolder)
    text = (project / "params.yaml").read_text()
    (project / "params.yaml").write_text(edit(text, {"data.source": "data/mine"}))
    proc = dvc(project, "repro", "prepare")
    meta = json.loads((project / "data/processed/meta.json").read_text())
    assert meta["channels"] == 3 and meta["image_size"] >= 32, meta
    assert meta["image_size"] == 48
    assert meta["mean"] == meta["std"] == [0.5, 0.5, 0.5]  # one value: every channel's
    assert "prepare.image_size: 48 (auto: " in proc.stdout
    assert "prepare.channels: 3 (auto: 24 of 24 images are colour)" in proc.stdout
