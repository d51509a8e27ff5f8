"""dvc.lock names the code that made each out: every project file a stage's module reaches for a
task (stages.lib.codedeps, read from the imports) lies under one of the stage's dvc.yaml deps,
for every stage and every task, in the root's dvc.yaml and in a pipeline folder's
(tools.init --into); and report-only code is no dep of train."""
import os
from pathlib import Path

import pytest
import yaml

from stages.lib.codedeps import (STAGES, STRING_IMPORTS, code_hash, looked_up, modules,
                                  name_tables, named_module, reach)
from stages.tasks import available

ROOT = Path(__file__).resolve().parent.parent


def code_deps(stage_spec: dict, task: str, into: Path | None = None) -> list[str]:
    """The stage's deps under stages/, with ${task} filled in, as root-relative paths (a
    pipeline folder's ../../stages/x is stages/x)."""
    out = []
    for dep in stage_spec.get("deps", []):
        dep = str(dep).replace("${task}", task)
        if into is not None:
            dep = os.path.normpath(into / dep)
        if dep == "stages" or dep.startswith("stages/"):
            out.append(dep)
    return out


def covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


def uncovered(dvc_yaml: dict, into: Path | None = None) -> list[str]:
    """'stage (task): file' for every reached file that no dep of the stage covers."""
    found = []
    for stage in STAGES:
        for task in available():
            deps = code_deps(dvc_yaml["stages"][stage], task, into)
            found += [f"{stage} (task {task}): {f}" for f in reach(stage, task)
                      if not covered(f, deps)]
    return found


def test_every_file_a_stage_reaches_is_one_of_its_deps():
    missing = uncovered(yaml.safe_load((ROOT / "dvc.yaml").read_text()))
    assert not missing, ("files a stage imports (stages.lib.codedeps.reach) that its dvc.yaml "
                         "deps do not cover: DVC would not rerun the stage when they change. "
                         "Add the file or its wing (folder) to the stage's deps:\n"
                         + "\n".join(missing))


def test_a_pipeline_folders_deps_cover_the_same_code():
    from tools.pipelines import folder_dvc_yaml

    into = Path("pipelines/ocr")
    text = folder_dvc_yaml((ROOT / "dvc.yaml").read_text(), into)
    assert not uncovered(yaml.safe_load(text), into)


def test_the_check_fails_when_a_dep_is_missing():
    """The test above is not vacuous: train without its training wing misses ema.py."""
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    train = spec["stages"]["train"]
    train["deps"] = [d for d in train["deps"] if d != "stages/lib/train"]
    missing = uncovered(spec)
    assert "train (task classification): stages/lib/train/ema.py" in missing
    assert "train (task ocr): stages/lib/train/ema.py" in missing


@pytest.mark.parametrize("task, edited", [
    ("classification", "stages/lib/train/ema.py"),  # the weight average
    ("ocr", "stages/tasks/common/ctc.py"),  # the CTC loss
    ("speech", "stages/tasks/common/ctc.py"),
    ("classification", "stages/lib/params.py"),  # the knobs' defaults and parsing
    ("audio", "stages/tasks/common/singlelabel/__init__.py"),  # the single-label loss
    ("speech", "stages/lib/modality/audiocore.py"),  # the log-mel features
    # the modality, imported by a name looked up in MODALITIES (modality.get)
    ("classification", "stages/lib/modality/image.py"),
    ("ocr", "stages/lib/modality/imageaug.py"),  # the default image augmentation
    ("speech", "stages/lib/modality/audio.py"),
    ("audio", "stages/lib/modality/audioaug.py"),  # the room and the microphone
])
def test_train_reaches_what_makes_its_weights(task, edited):
    assert edited in reach("train", task)


def test_report_only_code_is_no_dep_of_train():
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for task in available():
        train = code_deps(spec["train"], task)
        for report_only in ("stages/report/sections.py", f"stages/report/tasks/{task}.py"):
            assert report_only not in reach("train", task)
            assert not covered(report_only, train), (task, report_only)


def test_reach_follows_imports_inside_functions_and_by_name(tmp_path):
    """A function-level import and a module named to importlib (an f-string of the task) are
    reached; an __init__.py with only a docstring is not a file that can change an out."""
    pkg = tmp_path / "stages"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "tasks" / "a").mkdir(parents=True)
    (pkg / "tasks" / "b").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""The stages."""\n')
    (pkg / "lib" / "__init__.py").write_text('"""Helpers."""\n')
    (pkg / "lib" / "deep.py").write_text("X = 1\n")
    (pkg / "tasks" / "__init__.py").write_text(
        "import importlib\n\ndef get(name):\n"
        "    return importlib.import_module(f'stages.tasks.{name}')\n")
    (pkg / "tasks" / "a" / "__init__.py").write_text("def f():\n    from stages.lib import deep\n")
    (pkg / "tasks" / "b" / "__init__.py").write_text("Y = 2\n")
    (pkg / "train.py").write_text("from stages.tasks import get\n")
    assert set(modules(tmp_path, ("stages",))) >= {"stages.train", "stages.lib.deep"}
    assert reach("train", "a", tmp_path) == ("stages/lib/deep.py", "stages/tasks/__init__.py",
                                             "stages/tasks/a/__init__.py", "stages/train.py")
    assert "stages/tasks/b/__init__.py" in reach("train", "b", tmp_path)
    before = code_hash("train", "a", tmp_path)
    (pkg / "lib" / "deep.py").write_text("X = 2\n")
    assert code_hash("train", "a", tmp_path) != before


def test_every_import_by_name_in_the_project_is_resolved():
    """No importlib.import_module / __import__ call in stages/ names its module in a way reach
    cannot read (a variable, a call): such a module would fall outside the checkpoint and
    export fingerprints, as the modality did when modality.get looked its name up in a dict."""
    import ast

    unread = []
    for path in modules(ROOT, ("stages",)).values():
        tree = ast.parse(path.read_text())
        tables = name_tables(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in STRING_IMPORTS and not (named_module(node, "ocr")
                                                 or looked_up(node, tables)):
                unread.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not unread, "imports by a name reach cannot read: " + ", ".join(unread)


def test_reach_follows_a_name_looked_up_in_a_dict_of_modules(tmp_path):
    """`importlib.import_module(TABLE[name])` reaches every module TABLE names, and an edit to
    one of them changes the code hash; a dict of anything but module names is not read."""
    pkg = tmp_path / "stages"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""The stages."""\n')
    (pkg / "lib" / "one.py").write_text("X = 1\n")
    (pkg / "lib" / "two.py").write_text("from stages.lib import deep\n")
    (pkg / "lib" / "deep.py").write_text("Y = 1\n")
    (pkg / "lib" / "other.py").write_text("Z = 1\n")
    (pkg / "lib" / "__init__.py").write_text(
        "import importlib\n"
        "TABLE = {'a': 'stages.lib.one', 'b': 'stages.lib.two'}\n"
        "SIZES = {'a': 1, 'b': 'stages.lib.other'}\n"
        "def get(name):\n    return importlib.import_module(TABLE[name])\n"
        "def size(name):\n    return SIZES[name]\n")
    (pkg / "train.py").write_text("from stages.lib import get\n")
    assert reach("train", "a", tmp_path) == (
        "stages/lib/__init__.py", "stages/lib/deep.py", "stages/lib/one.py",
        "stages/lib/two.py", "stages/train.py")
    before = code_hash("train", "a", tmp_path)
    (pkg / "lib" / "deep.py").write_text("Y = 2\n")
    assert code_hash("train", "a", tmp_path) != before
