"""The Task seam is real: stages name no task, dvc.yaml's params are what stages read, and a task
defined in tests/ runs the whole pipeline without a change to any stage module."""
import json
import re
import shutil

import numpy as np
import pytest
import yaml

from stages.lib.io import StageError
from stages.lib.door import STAGE_PARAMS
from tests.conftest import ROOT, measured

BRIGHTNESS = ROOT / "tests/tasks/brightness"
BRIGHTNESS_REPORT = ROOT / "tests/tasks/brightness_report.py"  # its part of the run report


def test_no_stage_module_names_a_task():
    """Stages look the task up and call it: no `if task == ...` chain, no task's name in code
    (docstrings may give examples; DEFAULT_TASK is the one declaration of the default). And
    they reach the task's modality through it: from stages.lib.modality a stage module imports
    `get` alone (Task.modality_name's), never a modality's own module."""
    import ast

    from stages.tasks import available

    names = set(available())
    shells = sorted((ROOT / "stages").glob("*.py")) + sorted((ROOT / "stages/lib").glob("*.py"))
    for path in shells:
        tree = ast.parse(path.read_text())
        if path.parent == ROOT / "stages":
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "stages.lib.modality":
                    assert [a.name for a in node.names] == ["get"], (path, node.lineno)
                modules = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                           [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                assert not any(m.startswith("stages.lib.modality.") for m in modules), \
                    (path, node.lineno)
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        default = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                   and [getattr(t, "id", "") for t in node.targets] == ["DEFAULT_TASK"]}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and id(node) not in docstrings | default:
                assert node.value not in names, (path, node.lineno, node.value)
            if isinstance(node, ast.Compare) and any(
                    isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) for op in node.ops):
                sides = [ast.unparse(side) for side in (node.left, *node.comparators)]
                # allowed: `task is None`, and the default's name (model files from before tasks)
                assert {"DEFAULT_TASK", "None"} & set(sides) or not any(
                    re.fullmatch(r"(\w+\.)*task(\.name)?", side) for side in sides), \
                    (path, node.lineno, ast.unparse(node))


def test_dvc_yaml_params_are_what_each_stage_reads():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, reads in STAGE_PARAMS.items():
        assert stages[name]["params"] == ["task", *reads], name
        assert "stages/tasks/${task}" in stages[name]["deps"], name


def test_unknown_task_is_an_error_listing_the_tasks(tmp_path):
    from stages.tasks import current

    (tmp_path / "params.yaml").write_text("task: detectoin\n")
    with pytest.raises(StageError, match=r"task 'detectoin' does not exist; tasks: "
                                         r"audio, classification"):
        current(tmp_path / "params.yaml")


def test_a_param_outside_its_choices_or_range_is_named(tmp_path):
    from stages.lib.params import load

    path = tmp_path / "params.yaml"
    for section, values, message in (
            ("train", {"optimizer": "adam"}, r"`train\.optimizer` must be one of adamw, sgd"),
            ("split", {"val": 0.6, "test": 0.5}, r"split\.val \+ split\.test must be below 1"),
            ("evaluate", {"calibration_bins": 0}, r"`evaluate\.calibration_bins` must be >= 1"),
            ("export", {"atol": -1.0}, r"`export\.atol` must be >= 0"),
            ("prepare", {"channels": 3, "mean": [0.5, 0.5], "std": [0.5, 0.5]},
             r"one value per channel"),
            ("validate", {"on_error": "skip"}, r"one of fail, quarantine")):
        path.write_text(yaml.safe_dump({section: values}))
        with pytest.raises(StageError, match=message):
            load(section, path)


@pytest.mark.e2e
def test_a_task_defined_in_the_tests_runs_the_whole_pipeline(tmp_path):
    from tools.project import copy_project, dvc, git, set_params

    root = copy_project(ROOT, tmp_path / "project",
                        params={"sample.per_class": 20, "train.epochs": 4})
    shutil.copytree(BRIGHTNESS, root / "stages/tasks/brightness",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(BRIGHTNESS_REPORT, root / "stages/report/tasks/brightness.py")
    set_params(root, {"task": "brightness"})
    # Only the new task package, its report module and params.yaml differ from the project: no
    # stage changed.
    changed = git(root, "status", "--porcelain").split("\n")
    assert sorted(line[3:] for line in changed if line) == [
        "params.yaml", "stages/report/tasks/brightness.py", "stages/tasks/brightness/"]

    proc = dvc(root, "repro")
    assert re.findall(r"Running stage '([^']+)'", proc.stdout) == [
        "sample", "ingest", "validate", "split", "prepare", "train", "evaluate", "export",
        "report"]
    train = json.loads((root / "metrics/train.json").read_text())
    assert set(train) == {"epochs", "train_loss", "val_loss", "val_mae", "best_epoch"}
    assert (root / "plots/train/plots/metrics/val/mae.tsv").is_file()

    # The headline MAE is what the exported model really does on the test images.
    import onnxruntime as ort

    from stages.lib.modality.imagecore import normalize

    meta = json.loads((root / "data/processed/meta.json").read_text())
    assert "classes" not in meta  # nothing of classification leaked in
    from stages.lib.data.shards import samples_view

    images = samples_view("test", root / "data/processed")[:]
    session = ort.InferenceSession(str(root / "models/model.onnx"),
                                   providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["brightness"]
    props = session.get_modelmeta().custom_metadata_map
    assert json.loads(props["task"]) == "brightness"
    predicted = session.run(None, {"input": normalize(images, meta["mean"], meta["std"])})[0]
    truth = images.reshape(len(images), -1).mean(axis=1) / 255.0
    mae = float(np.abs(predicted[:, 0] - truth).mean())
    headline = json.loads((root / "metrics/eval.json").read_text())
    assert headline["samples"] == len(images)
    assert headline["mae"] == pytest.approx(mae, abs=1e-5)
    assert headline["mae"] < truth.mean() / 2  # far better than knowing nothing
    val = [float(line.split("\t")[-1]) for line in (
        root / "plots/train/plots/metrics/val/mae.tsv").read_text().splitlines()[1:]]
    assert len(val) == 4 and val[-1] < val[0]  # it learned
    rows = (root / "plots/eval/predictions.csv").read_text().splitlines()
    assert rows[0] == "path,target,predicted" and len(rows) == len(images) + 1
    export = json.loads((root / "metrics/export.json").read_text())
    assert measured(root)["max_abs_diff"] < 1e-4 and export["agreement"] == 1.0
    page = (root / "reports/run.html").read_text()
    assert "Brightness" in page and "test MAE" in page
    assert "Confusion matrix" not in page  # the classification sections are not drawn
    assert "up to date" in dvc(root, "status").stdout
