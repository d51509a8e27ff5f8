"""Issue 29, item 2: params that make no sense for the chosen task (a half-switched params.yaml)
stop the pipeline before any stage works, in one message naming every bad key and the init
command (Task.param_problems, run by stages.tasks.current, which every stage calls first)."""
import re
import subprocess

import pytest
import yaml

from stages.lib.io import StageError
from stages.tasks import available, current, get
from tests.conftest import (DETECTION_TINY, FORMATS_RUN, OCR_TINY_RUN, OWN_DATA_RUN, TINY_RUN,
                            detection_params, ocr_params, run_stage, segmentation_params)

STAGES = ("sample", "ingest", "validate", "split", "prepare", "train", "evaluate", "export",
          "report")


def write_params(folder, dotted: dict):
    """folder/params.yaml holding {"task": ..., "section.key": value, ...} as sections."""
    raw = {}
    for key, value in dotted.items():
        if "." in key:
            section, name = key.split(".", 1)
            raw.setdefault(section, {})[name] = value
        else:
            raw[key] = value
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def problems(tmp_path, dotted: dict) -> str:
    """The half-switched error of these params ("" when they fit their task)."""
    try:
        current(write_params(tmp_path, dotted))
    except StageError as exc:
        return exc.message
    return ""


@pytest.mark.parametrize("name", available())
def test_each_tasks_sample_recipe_fits_it(tmp_path, name):
    """The recipe the README, init and the e2e runs use passes, so the check blocks none."""
    assert current(write_params(tmp_path, {"task": name, **get(name).sample_params})).name \
        == name


@pytest.mark.parametrize("task, params", [
    ("classification", TINY_RUN), ("classification", OWN_DATA_RUN),
    ("classification", FORMATS_RUN), ("detection", detection_params(DETECTION_TINY)),
    ("segmentation", segmentation_params()), ("ocr", ocr_params(**OCR_TINY_RUN))])
def test_the_session_runs_params_fit_their_task(tmp_path, task, params):
    assert problems(tmp_path, {"task": task, **params}) == ""


def test_detection_with_the_classification_params_left_in_names_every_key(tmp_path):
    """The committed params.yaml (auto prepare settings) names the model alone, in
    test_every_task_names_the_classification_leftovers; here a grey 16 px prepare too."""
    # the committed params with a grey digits-style prepare (16 px, 1 channel, one mean/std)
    message = problems(tmp_path, {"task": "detection", "prepare.image_size": 16,
                                  "prepare.channels": 1})
    lines = message.splitlines()
    assert lines[0] == (f"{tmp_path / 'params.yaml'}: 5 param(s) do not fit task detection "
                        f"(left from another task?):")
    named = [re.match(r"  - ([a-z_.]+): ", line).group(1) for line in lines[1:-1]]
    assert named == ["train.model", "prepare.channels", "prepare.mean", "prepare.std",
                     "prepare.image_size"]
    assert "'small_cnn' is a classification model; detection builds centernet_small" in message
    assert "prepare.channels: 1, but detection takes 3 (RGB) or auto" in message
    assert lines[-1].startswith("Start from the task's own params with "
                                "`python -m tools.init --task detection`")


@pytest.mark.parametrize("task, keys", [
    ("detection", ["train.model"]),
    ("segmentation", ["train.model"]),
    ("ocr", ["train.model", "prepare.height"]),
])
def test_every_task_names_the_classification_leftovers(tmp_path, task, keys):
    message = problems(tmp_path, {"task": task})
    assert re.findall(r"^  - ([a-z_.]+): ", message, re.M) == keys
    assert f"`python -m tools.init --task {task}`" in message


def test_another_tasks_keys_set_under_this_task_are_named_with_their_owner(tmp_path):
    """OCR's recipe left in under detection: its model, its text-line geometry and its
    augmentations are named, each with the task that reads it; shared keys are not."""
    ocr = get("ocr").sample_params
    message = problems(tmp_path, {**ocr, **{k: v for k, v in get("detection").sample_params
                                            .items() if k != "train.model"},
                                  "task": "detection"})
    assert re.findall(r"^  - ([a-z_.]+): ", message, re.M) == [
        "train.model", "prepare.height", "prepare.width", "sample.lines", "train.aug_blur",
        "train.aug_stretch"]
    assert "train.model: 'crnn' is an ocr model" in message
    assert "train.aug_stretch: 0.15 is read by ocr only; detection ignores it: remove it " \
           "(default 0.0)" in message
    assert "train.epochs" not in message and "validate.near_dup_distance" not in message

    message = problems(tmp_path, {"task": "classification", "validate.min_box_px": 3.0,
                                  "sample.images": 50, "train.aug_blur": 0.2})
    assert "validate.min_box_px: 3.0 is read by detection only" in message
    assert "sample.images: 50 is read by detection and segmentation only" in message
    assert "train.aug_blur: 0.2 is read by ocr only" in message


def test_each_task_refuses_what_its_models_cannot_take(tmp_path):
    assert "prepare.image_size: 20 is not a multiple of 8" in problems(
        tmp_path, {**segmentation_params(), "task": "segmentation", "prepare.image_size": 20})
    assert "train.model lraspp_mobilenet_v3_large takes RGB" in problems(
        tmp_path, {"task": "segmentation", "train.model": "lraspp_mobilenet_v3_large",
                   "prepare.channels": 1})
    assert problems(tmp_path, {"task": "segmentation", "train.model": "unet"}) == ""  # grey
    assert "prepare.height: 36, but ocr reads text lines" in problems(
        tmp_path, {**ocr_params(), "task": "ocr", "prepare.height": 36, "prepare.width": 192})
    assert "prepare.letterbox: true, but ocr's targets" in problems(
        tmp_path, {**ocr_params(), "task": "ocr", "prepare.letterbox": True})
    assert "train.model: 'yolo' is not a model detection builds" in problems(
        tmp_path, {**detection_params(), "task": "detection", "train.model": "yolo"})
    # classification takes any torchvision classifier, and refuses another task's model
    assert problems(tmp_path, {"task": "classification", "train.model": "resnet18"}) == ""
    assert "'unet' is a segmentation model; classification builds small_cnn" in problems(
        tmp_path, {"task": "classification", "train.model": "unet"})
    assert problems(tmp_path, {"task": "detection", **detection_params(),
                               "prepare.channels": "auto", "prepare.mean": "auto",
                               "prepare.std": "auto"}) == ""


def test_the_tasks_model_lists_are_the_models_they_build():
    from stages.tasks.detection.model import CENTERNETS
    from stages.tasks.detection.torchvision_detectors import DETECTORS
    from stages.tasks.segmentation.model import TORCHVISION

    assert get("detection").models == (*CENTERNETS, *DETECTORS)
    assert get("segmentation").models == ("unet", "small_unet", *TORCHVISION)
    from stages.tasks.ocr.model import SIZES

    assert get("ocr").models == tuple(SIZES) and get("classification").models == ("small_cnn",)


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_checks_its_params_before_it_works(tmp_path, stage):
    """Run alone (as `dvc repro <stage>` would), each stage stops on the half-switched params
    with the message, and writes nothing."""
    write_params(tmp_path, {"task": "detection"})
    proc = run_stage(stage, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "do not fit task detection" in proc.stderr and "train.model" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


@pytest.mark.e2e
def test_dvc_repro_of_a_half_switched_project_stops_before_any_stage_works(project):
    """The acceptance: `task: detection` with the classification params left in. One error,
    naming the keys and the init command, and no stage wrote anything."""
    from tools.project import dvc, git, set_params

    # the committed params with the digits' grey 16 px prepare written out, as a user had them
    set_params(project, {"task": "detection", "prepare.channels": 1, "prepare.image_size": 16})
    git(project, "commit", "-qam", "switch the task only")
    proc = dvc(project, "repro", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert re.findall(r"Running stage '([^']+)'", out) == ["sample"]
    assert out.count("do not fit task detection") == 1
    for key in ("train.model", "prepare.channels", "prepare.mean", "prepare.std",
                "prepare.image_size"):
        assert f"  - {key}: " in out
    assert "`python -m tools.init --task detection`" in out
    for path in ("data/sample", "data/manifest.csv", "data/split", "data/processed",
                 "models/model.pt", "models/model.onnx", "reports/run.html"):
        assert not (project / path).exists(), path
    status = subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True,
                            text=True, check=True).stdout
    assert status == ""  # dvc.lock and the git-tracked metrics untouched
