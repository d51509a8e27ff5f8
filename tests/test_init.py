"""Issue 29: `tools.init` without a pipeline run: the built-in samples' params, the round trip
back to the committed params.yaml (comments kept), the refusal to overwrite uncommitted
changes, the errors for a folder it cannot read, and params_text's in-place edits."""
import hashlib
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, run_tool
from tests.layouts import imagefolder, yolo
from tools.project import copy_project, git
from tools.params_text import edit, render


def snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def project(tmp_path):
    return copy_project(ROOT, tmp_path / "project")


def init(project, *args):
    return run_tool("init", *args, cwd=project)


def flat(params: dict) -> dict:
    return {f"{s}.{k}": v for s, section in params.items() if isinstance(section, dict)
            for k, v in section.items()}


def test_each_sample_gets_its_recipe_and_classification_restores_the_committed_file(project):
    """`init --task T` is the built-in sample's recipe (Task.sample_params) with every key a
    previous task set back at its default; back to classification, params.yaml is the
    committed file again, byte for byte, comments and all."""
    from stages.tasks import get

    committed = (project / "params.yaml").read_text()
    base = flat(yaml.safe_load(committed))
    for name in ("ocr", "detection", "segmentation", "classification"):
        proc = init(project, "--task", name, *(["--force"] if name != "ocr" else []))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        params = yaml.safe_load((project / "params.yaml").read_text())
        assert params["task"] == name and params["data"]["source"] == "data/sample"
        expected = {**base, **get(name).sample_params, "data.source": "data/sample"}
        assert flat(params) == expected, name  # nothing of the previous task is left
        for key, value in get(name).sample_params.items():
            if key != "data.source":
                assert f"  {key}: {render(value)}  (the {name} sample's recipe" in \
                    proc.stdout
    assert "train.model: small_cnn  (the default; was unet)" in proc.stdout
    assert (project / "params.yaml").read_text() == committed


def test_refuses_to_overwrite_uncommitted_params_unless_forced(project, tmp_path):
    path = project / "params.yaml"
    path.write_text(path.read_text().replace("epochs: 15", "epochs: 40"))
    mine = path.read_bytes()
    proc = init(project, "--task", "ocr")
    assert proc.returncode != 0
    assert "params.yaml has changes that are not committed" in proc.stderr
    assert "--force" in proc.stderr and "Traceback" not in proc.stderr
    assert path.read_bytes() == mine  # untouched
    proc = init(project, "--task", "ocr", "--force")
    assert proc.returncode == 0, proc.stderr
    assert "--force: overwriting them" in proc.stdout
    assert yaml.safe_load(path.read_text())["train"]["epochs"] == 12  # the ocr recipe's

    loose = copy_project(ROOT, tmp_path / "no-git", git_init=False)
    proc = init(loose, "--task", "ocr")
    assert proc.returncode != 0 and "is not in a git repository" in proc.stderr
    assert (loose / "params.yaml").read_bytes() == (ROOT / "params.yaml").read_bytes()


def test_own_data_is_only_read_and_gets_a_dvc_add_hint(project, tmp_path):
    data = project / "data/mine"
    imagefolder(data)
    before = snapshot(data)
    proc = init(project, "--task", "classification", "--source", "data/mine")
    assert proc.returncode == 0, proc.stderr
    assert snapshot(data) == before
    assert "found: ImageFolder (<class>/<image>): 3 classes (cat, dog, fox), 24 files, no " \
           "split of its own" in proc.stdout
    assert "  split.by: hash  (the data has no split of its own" in proc.stdout
    assert "  prepare.image_size: 48  (fitted: median shorter side 48 px" in proc.stdout
    assert "  prepare.channels: 3  (fitted: 24 of 24 images are colour; was auto)" in proc.stdout
    assert "version it: dvc add data/mine && git add data/mine.dvc data/.gitignore" in proc.stdout
    assert "revisit for classification after the first run:\n  train.epochs: " in proc.stdout

    git(project, "add", "-A")  # tracked by git now: no hint
    git(project, "commit", "-qm", "data")
    proc = init(project, "--task", "classification", "--source", "data/mine")
    assert proc.returncode == 0 and "version it" not in proc.stdout

    outside = tmp_path / "elsewhere"
    yolo(outside)
    proc = init(project, "--task", "detection", "--source", str(outside))
    assert proc.returncode == 0, proc.stderr
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert params["data"]["source"] == str(outside.resolve())
    assert "is outside the project" in proc.stdout


@pytest.mark.parametrize("task, writer, message", [
    ("classification", yolo, "It looks like a detection dataset (YOLO: data.yaml): run init "
                             "with --task detection"),
    ("detection", imagefolder, "not a detection dataset: it needs data.yaml"),
    ("ocr", imagefolder, "no ocr images init can read in it: expected rec_gt.txt"),
    ("segmentation", yolo, "expected images + masks"),
])
def test_a_layout_it_cannot_read_is_an_error_naming_what_it_expected(project, task, writer,
                                                                     message):
    writer(project / "data/other")
    before = (project / "params.yaml").read_bytes()
    proc = init(project, "--task", task, "--source", "data/other")
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (project / "params.yaml").read_bytes() == before


def test_params_text_sets_values_in_place_and_refuses_what_it_cannot_edit():
    text = ("task: a   # the task\n"
            "train:\n"
            "  model: small_cnn       # the model\n"
            "                         #   continued\n"
            "  epochs: 15             # how long\n"
            "prepare:\n"
            "  mean: [0.5]            # per channel\n")
    out = edit(text, {"task": "ocr", "train.model": "crnn", "train.lr": 0.01,
                      "prepare.mean": [0.5, 0.5, 0.5], "split.by": "given"})
    assert out == ("task: ocr # the task\n"
                   "train:\n"
                   "  model: crnn            # the model\n"
                   "                         #   continued\n"
                   "  epochs: 15             # how long\n"
                   "  lr: 0.01\n"
                   "prepare:\n"
                   "  mean: [0.5, 0.5, 0.5]  # per channel\n"
                   "split:\n"
                   "  by: given\n")
    assert edit(out, {"task": "a", "train.model": "small_cnn"}).startswith(
        "task: a   # the task\ntrain:\n  model: small_cnn       # the model\n")  # as before
    assert render("16") == "'16'" and render("auto") == "auto" and render(None) == "null"
    with pytest.raises(ValueError, match="could not be edited in place"):
        edit("prepare:\n  mean: &m [0.5]\n  std: *m\n", {"prepare.mean": [0.5, 0.5]})


def test_params_text_replaces_block_style_lists_whole():
    """A params.yaml written by yaml.safe_dump holds lists in block style (`mean:` then `- 0.5`
    lines): the edit replaces the whole value and keeps the comment lines below it."""
    import yaml

    from tools.params_text import edit

    text = ("task: classification\nprepare:\n  image_size: 16   # size\n  mean:\n  - 0.5\n"
            "  - 0.4\n                   # a comment line\n  std:\n    - 0.5\n  channels: 1\n"
            "train:\n  epochs: 1\n")
    out = edit(text, {"prepare.mean": "auto", "prepare.std": [0.25, 0.25]})
    assert yaml.safe_load(out)["prepare"] == {"image_size": 16, "mean": "auto",
                                              "std": [0.25, 0.25], "channels": 1}
    assert "# a comment line" in out and "- 0.4" not in out


def test_init_names_the_artifact_after_the_task_and_touches_nothing_else(project):
    """dvc.yaml's `artifacts:` block follows the task (docs/registry.md); every other byte of
    dvc.yaml stays, and back to classification the file is the committed one."""
    committed = (project / "dvc.yaml").read_text()
    assert yaml.safe_load(committed)["artifacts"] == {"classification": {
        "type": "model", "path": "models/model.onnx", "labels": ["classification"],
        "desc": "the classification model exported to ONNX by the export stage, for predict "
                "and serve"}}
    proc = init(project, "--task", "ocr")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "dvc.yaml: artifact ocr (models/model.onnx" in proc.stdout
    text = (project / "dvc.yaml").read_text()
    art = yaml.safe_load(text)["artifacts"]
    assert list(art) == ["ocr"] and art["ocr"]["labels"] == ["ocr"]
    assert art["ocr"]["type"] == "model" and art["ocr"]["path"] == "models/model.onnx"
    before, after = committed.split("artifacts:")[0], text.split("artifacts:")[0]
    assert before == after and committed.split("\nstages:\n")[1] == text.split("\nstages:\n")[1]
    proc = init(project, "--task", "classification", "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (project / "dvc.yaml").read_text() == committed


def test_init_into_a_pipeline_folder_with_a_source_of_the_root(project):
    """--into: the folder is made from the root's files; data.source is the root's folder seen
    from the pipeline (../../data/mine), and the root's params.yaml and dvc.yaml are kept."""
    before = {rel: (project / rel).read_bytes() for rel in ("params.yaml", "dvc.yaml")}
    imagefolder(project / "data/mine")
    proc = init(project, "--task", "classification", "--source", "data/mine",
                "--into", "pipelines/pets")
    assert proc.returncode == 0, proc.stderr
    assert "dvc.yaml: artifact pipelines/pets:pets" in proc.stdout
    assert "version it: dvc add data/mine && git add data/mine.dvc" in proc.stdout
    assert "next: dvc repro pipelines/pets/dvc.yaml" in proc.stdout
    folder = project / "pipelines/pets"
    params = yaml.safe_load((folder / "params.yaml").read_text())
    assert params["data"]["source"] == "../../data/mine" and params["prepare"]["image_size"] == 48
    spec = yaml.safe_load((folder / "dvc.yaml").read_text())
    assert "pets" in spec["artifacts"] and "../../stages/ingest.py" in spec["stages"]["ingest"][
        "deps"]
    assert {rel: (project / rel).read_bytes() for rel in before} == before
    # a second init in the folder sets it up again, guarding its committed params.yaml
    git(project, "add", "-A")
    git(project, "commit", "-qm", "pets")
    (folder / "params.yaml").write_text((folder / "params.yaml").read_text() + "# mine\n")
    proc = init(project, "--task", "classification", "--into", "pipelines/pets")
    assert proc.returncode == 1 and "params.yaml has changes that are not committed" in \
        proc.stderr
    proc = init(project, "--task", "ocr", "--into", "/tmp/elsewhere")
    assert proc.returncode == 1 and "give a folder inside the project" in proc.stderr
