"""Issue 17, item 1: prepare's `auto` image size, channels and mean/std fit the user's data,
are deterministic, recorded in meta.json and explained one line per setting."""
import json

import pytest
from PIL import Image

from tests.conftest import copy_run, run_stage
from tools.project import dvc, set_params

DIGIT_DEFAULTS = {"prepare.image_size": 16, "prepare.channels": 1, "prepare.mean": [0.5],
                  "prepare.std": [0.5]}


def meta(project):
    return json.loads((project / "data/processed/meta.json").read_text())


@pytest.mark.e2e
def test_auto_settings_fit_the_data_and_say_why(own_data_project):
    m = meta(own_data_project)
    assert (m["image_size"], m["channels"]) == (48, 3)
    assert len(m["mean"]) == len(m["std"]) == 3 and 0.0 < min(m["std"])
    assert m["mean"] != [0.5, 0.5, 0.5]
    log = (own_data_project.parent / "repro.log").read_text()
    assert "prepare.image_size: 48 (auto: median shorter side of" in log
    assert "prepare.channels: 3 (auto: 90 of 90 images are colour)" in log
    assert f"prepare.mean/std: {m['mean']} / {m['std']} (auto: per channel over" in log
    assert json.loads((own_data_project / "metrics/eval.json").read_text())["accuracy"] >= 0.9
    assert "is empty" not in log  # item 8: no DVC warning about models/torchscript


@pytest.mark.e2e
def test_auto_choices_are_a_function_of_the_data(own_data_project, tmp_path):
    """prepare again, from another folder: the same meta.json and shards, bit for bit."""
    run = copy_run(own_data_project, tmp_path / "again")
    proc = run_stage("prepare", cwd=run)
    assert proc.returncode == 0, proc.stderr
    before = sorted(p.relative_to(own_data_project)
                    for p in (own_data_project / "data/processed").rglob("*") if p.is_file())
    assert before and all((run / p).read_bytes() == (own_data_project / p).read_bytes()
                          for p in before)
    assert dvc(run, "status").stdout.strip().endswith("Data and pipelines are up to date.")


@pytest.mark.e2e
def test_digit_defaults_on_rgb_data_are_worse_and_prepare_says_so(own_data_project, tmp_path):
    run = copy_run(own_data_project, tmp_path / "digits")
    set_params(run, DIGIT_DEFAULTS)
    proc = dvc(run, "repro")
    assert ("prepare.image_size: 16 (params.yaml); auto would choose 48" in proc.stdout)
    assert "prepare.channels: 1 (params.yaml); auto would choose 3: 90 of 90 images are " \
           "colour" in proc.stdout
    grey = json.loads((run / "metrics/eval.json").read_text())["accuracy"]
    auto = json.loads((own_data_project / "metrics/eval.json").read_text())["accuracy"]
    assert auto > grey + 0.3, (auto, grey)


def write_params(tmp_path, **prepare):
    from tools.project import set_params

    path = tmp_path / "params.yaml"
    path.write_text("prepare: {}\n")
    set_params(tmp_path, {f"prepare.{k}": v for k, v in prepare.items()})
    return path


@pytest.mark.parametrize("prepare, error", [
    ({"image_size": "big"}, "`prepare.image_size` must be an integer >= 1 or auto"),
    ({"image_size": 0}, "`prepare.image_size` must be an integer >= 1 or auto"),
    ({"channels": 2}, "`prepare.channels` must be one of 1, 3, auto"),
    ({"mean": "auto"}, "prepare.mean and prepare.std are both auto or both lists"),
    ({"mean": "mine", "std": "auto"}, "`prepare.mean` must be a list"),
    ({"channels": 3, "mean": [0.5, 0.5], "std": [0.5, 0.5]}, "need one value per channel"),
])
def test_bad_prepare_values_are_named(tmp_path, prepare, error):
    from stages.lib.io import StageError
    from stages.lib.params import load

    with pytest.raises(StageError, match=error.replace("(", r"\(").replace(")", r"\)")):
        load("prepare", write_params(tmp_path, **prepare))


def test_auto_values_parse(tmp_path):
    from stages.lib.params import load

    p = load("prepare", write_params(tmp_path, image_size="auto", channels="auto",
                                     mean="auto", std="auto"))
    assert (p.image_size, p.channels, p.mean, p.std) == ("auto",) * 4
    p = load("prepare", write_params(tmp_path, image_size=32, channels=3,
                                     mean=[0, 0, 0], std=[1, 1, 1]))
    assert (p.image_size, p.channels, p.mean) == (32, 3, [0.0, 0.0, 0.0])


def test_auto_size_rounds_and_caps():
    from stages.lib.modality.imagefit import AUTO_SIZE_CAP, auto_size

    assert auto_size([48] * 5) == 48
    assert auto_size([8, 8, 8]) == 16  # never below 16: the 8x8 digits are prepared at 16
    assert auto_size([3, 4]) == 16
    assert auto_size([61, 62, 1000]) == 64
    assert auto_size([4000] * 3) == AUTO_SIZE_CAP == 128


def test_grey_means_every_pixel_grey_including_palettes(tmp_path):
    from stages.lib.modality.imagefit import is_grey

    Image.new("L", (8, 8)).save(tmp_path / "l.png")
    Image.new("RGB", (8, 8), (5, 5, 5)).save(tmp_path / "rgb.png")  # RGB mode counts as colour
    grey_pal = Image.new("P", (8, 8))
    grey_pal.putpalette([v for i in range(256) for v in (i, i, i)])
    grey_pal.save(tmp_path / "greypal.png")
    colour_pal = Image.new("P", (8, 8))
    colour_pal.putpalette([255, 0, 0] + [0] * 765)
    colour_pal.save(tmp_path / "colourpal.png")
    assert is_grey(tmp_path / "l.png") and is_grey(tmp_path / "greypal.png")
    assert not is_grey(tmp_path / "rgb.png") and not is_grey(tmp_path / "colourpal.png")
