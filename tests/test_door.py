"""One door into a stage (stages.tasks.open_stage, stages/lib/door.py): params.yaml read once,
the task checked, and the stage handed only the params it declares in dvc.yaml, so a stage that
reads anything else fails here instead of going silently un-rerun by DVC. And the task's
settings (what its annotations and checks need of other stages' params) are values every caller
passes: tools.init reads a dataset as ingest does."""
import ast
from pathlib import Path

import pytest

from stages.lib.codedeps import STAGES, entry, modules
from stages.lib.door import declared
from stages.lib.io import StageError
from stages.lib.params import parse_all
from tests.conftest import ROOT, write_image

EVERY = parse_all({}, "params.yaml")


def test_a_stage_gets_what_it_declares_and_nothing_else():
    split = declared("split", EVERY)
    assert split["split"].seed == 42 and split["validate"].near_dup_distance == 4
    with pytest.raises(StageError, match=r"stage split read `validate\.min_side`, which it does "
                                         r"not declare: add 'validate\.min_side' to "
                                         r"STAGE_PARAMS\['split'\].*dvc\.yaml"):
        split["validate"].min_side  # noqa: B018 (the read is what is refused)
    with pytest.raises(StageError, match=r"stage split read `train`"):
        split["train"]
    # prepare's placement keys are read undeclared, by name (stages/lib/door.py says why)
    prepare = declared("prepare", EVERY)["prepare"]
    assert prepare.workers == 0 and prepare.engine == "local"
    with pytest.raises(StageError, match="export"):
        declared("prepare", EVERY)["export"]


def params_calls(path: Path) -> list[str]:
    """Names of stages.lib.params' file readers a file imports (read, load, load_all,
    task_name; parse_all of a dict, the defaults, reads no file)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "stages.lib.params":
            found += [a.name for a in node.names
                      if a.name in ("read", "load", "load_all", "task_name")]
    return found


def test_every_stage_opens_through_the_door_and_reads_no_params_itself():
    known = modules(ROOT, ("stages",))
    stage_files = {s: known[entry(s)] for s in STAGES} | {
        "prepare_jobs": ROOT / "stages/prepare_jobs.py",
        "prepare_ray": ROOT / "stages/prepare_ray.py"}
    for stage, path in stage_files.items():
        assert params_calls(path) == [], (stage, path)
    for stage in STAGES:
        text = known[entry(stage)].read_text()
        assert text.count("open_stage(") == 1 and f'open_stage("{stage}"' in text, stage


# --- settings: a value every caller passes -----------------------------------------------------

def test_settings_are_values_not_state_on_the_shared_task():
    from stages.tasks import get

    audio, ocr = get("audio"), get("ocr")
    at_8k = audio.check_settings(parse_all({"prepare": {"audio": {"sample_rate": 8000}}},
                                           "p.yaml"))
    assert at_8k == {"rate": 8000} and audio.check_settings(EVERY) == {"rate": 16000}
    assert ocr.check_settings(parse_all({"prepare": {"height": 48, "width": 320}}, "p.yaml")) \
        == {"geometry": (48, 320)}
    assert not [k for k in vars(audio) if not k.startswith("__")]  # nothing kept on it


def boxes_tree(root: Path) -> None:
    (root / "data.yaml").write_text("names: [ring]\n")
    for k, n in enumerate((1, 3)):  # one image with 1 box, one with 3
        write_image(root / f"images/train/im{k}.png", (64, 64), "RGB", seed=k)
        label = root / f"labels/train/im{k}.txt"
        label.parent.mkdir(parents=True, exist_ok=True)
        label.write_text("".join(f"0 0.{2 + i} 0.5 0.1 0.1\n" for i in range(n)))


def test_init_reads_a_dataset_as_ingest_does(tmp_path):
    """validate.max_boxes: 2 in params.yaml: ingest marks the 3-box image, and tools.init's
    reading of the same folder leaves it out too (it saw the default cap before)."""
    from stages.ingest import inventory
    from stages.tasks import get
    from tools.init import sniff

    boxes_tree(tmp_path)
    task = get("detection")
    settings = task.read_settings(parse_all({"validate": {"max_boxes": 2}}, "params.yaml"))
    rows, _ = inventory(tmp_path, workers=1, task=task, settings=settings)
    refused = {r["path"] for r in rows if r["error_kind"] == "too_many_boxes"}
    assert refused == {"images/train/im1.png"}
    _, usable, _, _ = sniff(task, tmp_path, settings)
    assert {r["path"] for r in usable} == {"images/train/im0.png"}
    _, usable, _, _ = sniff(task, tmp_path, task.read_settings(EVERY))
    assert {r["path"] for r in usable} == {"images/train/im0.png", "images/train/im1.png"}
