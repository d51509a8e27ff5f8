"""Detection's data gate (issue 18): a YOLO tree and a COCO tree holding every bad label kind;
validate names each one (one great_expectations row per box), quarantine leaves exactly those
images out, and no file is modified."""
import hashlib
import json
import shutil
from pathlib import Path

import yaml

from tests.conftest import ROOT, run_stage, write_image

GOOD = "0 0.5 0.5 0.25 0.25\n1 0.25 0.25 0.2 0.3\n"
BAD = {  # image name -> (label text, check that must name it)
    "columns": ("0 0.5 0.5 0.2\n", "malformed_box"),
    "nan": ("0 a 0.5 0.2 0.2\n", "malformed_box"),
    "klass": ("7 0.5 0.5 0.2 0.2\n", "unknown_class"),
    "outside": ("0 0.95 0.5 0.2 0.2\n", "box_outside"),
    "flat": ("0 0.5 0.5 0 0.2\n", "box_degenerate"),
    "tiny": ("0 0.5 0.5 0.01 0.2\n", "box_too_small"),
    "twice": ("1 0.5 0.5 0.2 0.2\n1 0.5 0.5 0.2 0.2\n", "duplicate_box"),
}


def params(tmp, source, **validate):
    """params.yaml of the detection recipe (its sample_params) on source."""
    from stages.tasks.detection import TASK

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["task"] = "detection"
    for dotted, value in TASK.sample_params.items():
        section, key = dotted.split(".")
        raw[section][key] = value
    raw["data"]["source"] = str(source)
    raw["validate"].update(near_dup_distance=-1, **validate)
    (tmp / "params.yaml").write_text(yaml.safe_dump(raw))


def snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def yolo_tree(root: Path) -> set:
    (root / "data.yaml").parent.mkdir(parents=True, exist_ok=True)
    (root / "data.yaml").write_text("names: [ring, block]\n")
    for k in range(4):
        write_image(root / f"images/train/good{k}.png", (64, 64), "RGB", seed=k)
        (root / f"labels/train/good{k}.txt").parent.mkdir(parents=True, exist_ok=True)
        (root / f"labels/train/good{k}.txt").write_text(GOOD)
    for k, (name, (text, _)) in enumerate(BAD.items()):
        write_image(root / f"images/train/{name}.png", (64, 64), "RGB", seed=10 + k)
        (root / f"labels/train/{name}.txt").write_text(text)
    write_image(root / "images/val/background.png", (64, 64), "RGB", seed=99)
    (root / "labels/val").mkdir(parents=True)
    (root / "labels/val/ghost.txt").write_text(GOOD)  # no image
    return {f"images/train/{n}.png" for n in BAD} | {"labels/val/ghost.txt"}


def test_yolo_gate_names_every_bad_label(in_tmp):
    source = in_tmp / "yolo"
    bad = yolo_tree(source)
    before = snapshot(source)
    params(in_tmp, source)
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    rows = {r["path"]: r for r in __import__("csv").DictReader(open("data/manifest.csv"))}
    good = rows["images/train/good0.png"]
    assert good["annotation_sha256"] == hashlib.sha256(GOOD.encode()).hexdigest()
    assert rows["images/val/background.png"]["annotation_sha256"] == ""
    proc = run_stage("validate", cwd=in_tmp)
    assert proc.returncode != 0
    for name, (_, check) in BAD.items():
        assert f"[{check}] images/train/{name}.png: line" in proc.stderr, (name, proc.stderr)
    assert "[orphan_label] labels/val/ghost.txt" in proc.stderr
    assert "line 2: duplicate box" in proc.stderr and "line 1: duplicate box" in proc.stderr
    assert "good0" not in proc.stderr and "background" not in proc.stderr
    summary = json.loads(Path("metrics/validation.json").read_text())
    counts = json.loads(Path("metrics/validation_checks.json").read_text())
    assert counts["no_labels"] == 1  # a warning, never blocking
    assert summary["invalid"] == len(bad)
    assert summary["per_class"]["ring"] >= 4 and summary["per_class"]["block"] >= 4

    params(in_tmp, source, on_error="quarantine")
    assert run_stage("validate", cwd=in_tmp).returncode == 0
    quarantined = {r["path"] for r in __import__("csv").DictReader(open("data/quarantine.csv"))}
    assert quarantined == bad
    assert snapshot(source) == before  # nothing rewritten, nothing deleted

    params(in_tmp, source, require_labels=True)
    proc = run_stage("validate", cwd=in_tmp)
    assert "[unlabelled] images/val/background.png" in proc.stderr


def test_coco_gate(in_tmp):
    source = in_tmp / "coco"
    for k in range(3):
        write_image(source / f"images/train/im{k}.png", (80, 40), "RGB", seed=k)
    images = [{"id": k, "file_name": f"im{k}.png", "width": 80, "height": 40} for k in range(3)]
    images.append({"id": 9, "file_name": "gone.png", "width": 80, "height": 40})
    anns = [
        {"id": 1, "image_id": 0, "category_id": 3, "bbox": [10, 10, 20, 10], "iscrowd": 0},
        {"id": 2, "image_id": 1, "category_id": 5, "bbox": [70, 10, 20, 10], "iscrowd": 0},
        {"id": 3, "image_id": 2, "category_id": 8, "bbox": [10, 10, 20, 10], "iscrowd": 0},
        {"id": 4, "image_id": 2, "category_id": 3, "bbox": [0, 0, 80, 40], "iscrowd": 1},
        {"id": 5, "image_id": 42, "category_id": 3, "bbox": [1, 1, 5, 5], "iscrowd": 0},
    ]
    (source / "annotations").mkdir(parents=True)
    (source / "annotations/instances_train.json").write_text(json.dumps({
        "images": images, "annotations": anns,
        "categories": [{"id": 3, "name": "cat"}, {"id": 5, "name": "dog"}]}))
    params(in_tmp, source)
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    rows = {r["path"]: r for r in __import__("csv").DictReader(open("data/manifest.csv"))}
    assert json.loads(rows["images/train/im0.png"]["boxes"]) == [["annotation 1", "cat",
                                                                  0.25, 0.375, 0.25, 0.25]]
    assert rows["images/train/im0.png"]["split"] == "train"
    assert len(json.loads(rows["images/train/im2.png"]["boxes"])) == 1  # the crowd box is out
    proc = run_stage("validate", cwd=in_tmp)
    assert proc.returncode != 0
    assert "[box_outside] images/train/im1.png: annotation 2" in proc.stderr
    assert "[unknown_class] images/train/im2.png: annotation 3: class #8" in proc.stderr
    assert "[coco_unknown_image] annotations/instances_train.json#annotation=5" in proc.stderr
    assert "[missing] gone.png" in proc.stderr
    assert "im0" not in proc.stderr
    shutil.rmtree(source)
