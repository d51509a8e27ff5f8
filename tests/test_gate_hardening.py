"""Issue 30, items 3-7: what the data gate must name instead of crashing or mislabelling.

COCO numbers that are NaN, Infinity or strings; duplicate COCO image ids and file names, and a
declared size that differs from the file; annotation files that are symlinks out of
data.source; YAML alias bombs; malformed classes.yaml. Real files, real stage runs.
"""
import csv
import hashlib
import json
from pathlib import Path

import yaml
from PIL import Image

from tests.conftest import ROOT, run_stage, write_image


def params(tmp, source, task="detection", **validate):
    """params.yaml of the task's recipe (its sample_params) on source."""
    from stages.tasks import get

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["task"] = task
    for dotted, value in get(task).sample_params.items():
        section, key = dotted.split(".")
        raw[section][key] = value
    raw["data"]["source"] = str(source)
    raw["validate"].update(near_dup_distance=-1, **validate)
    (tmp / "params.yaml").write_text(yaml.safe_dump(raw))


def manifest(tmp) -> dict:
    with open(tmp / "data/manifest.csv", newline="") as f:
        return {r["path"]: r for r in csv.DictReader(f)}


def snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def one_line_error(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("Error: "), \
        proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def coco(source: Path, images: list, annotations: list, categories=None, text=None):
    """annotations/instances_train.json under source (text: the raw JSON, for NaN/Infinity)."""
    (source / "annotations").mkdir(parents=True, exist_ok=True)
    (source / "annotations/instances_train.json").write_text(text or json.dumps({
        "images": images, "annotations": annotations,
        "categories": categories or [{"id": 1, "name": "ring"}, {"id": 2, "name": "block"}]}))


def box(ann_id, image_id, bbox, category=1):
    return {"id": ann_id, "image_id": image_id, "category_id": category, "bbox": bbox,
            "iscrowd": 0}


# --- 3. NaN, Infinity and strings in COCO numbers -----------------------------------------

def test_coco_nan_infinity_and_strings_are_named_gate_errors(in_tmp):
    source = in_tmp / "coco"
    names = ["good", "nan", "inf", "text", "short", "cat_nan", "cat_text", "w_text", "w_nan",
             "h_inf", "id_nan", "w_zero"]
    for k, name in enumerate(names):
        write_image(source / f"images/train/{name}.png", (80, 40), "RGB", seed=k)
    images = {name: {"id": k, "file_name": f"{name}.png", "width": 80, "height": 40}
              for k, name in enumerate(names)}
    images["w_text"]["width"] = "80"
    images["w_nan"]["width"] = "@NaN@"
    images["h_inf"]["height"] = "@Infinity@"
    images["id_nan"]["id"] = "@NaN@"
    images["w_zero"]["width"] = 0
    anns = [box(1, 0, [10, 10, 20, 10]), box(2, 1, ["@NaN@", 10, 5, 10]),
            box(3, 2, [10, 10, "@Infinity@", 10]), box(4, 3, [10, "10", 20, 10]),
            box(5, 4, [10, 10, 20]), box(6, 5, [10, 10, 20, 10], "@NaN@"),
            box(7, 6, [10, 10, 20, 10], "1"), *[box(8 + k, k, [10, 10, 20, 10])
                                                for k in (7, 8, 9, 11)]]
    text = json.dumps({"images": list(images.values()), "annotations": anns,
                       "categories": [{"id": 1, "name": "ring"}]})
    text = text.replace('"@NaN@"', "NaN").replace('"@Infinity@"', "Infinity")
    coco(source, [], [], text=text)
    params(in_tmp, source)
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    proc = run_stage("validate", cwd=in_tmp)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    err = proc.stderr
    assert "[malformed_box] images/train/nan.png: annotation 2: malformed row: bbox[0] is " \
           "NaN, not a finite number" in err
    assert "[malformed_box] images/train/inf.png: annotation 3: malformed row: bbox[2] is " \
           "Infinity, not a finite number" in err
    assert "[malformed_box] images/train/text.png: annotation 4: malformed row: bbox[1] is " \
           "'10' (a string), not a number" in err
    assert "[malformed_box] images/train/short.png: annotation 5: malformed row: bbox is " \
           "[10, 10, 20], not [x, y, width, height]" in err
    assert "[malformed_box] images/train/cat_nan.png: annotation 6: malformed row: " \
           "category_id is NaN, not an integer" in err
    assert "[malformed_box] images/train/cat_text.png: annotation 7: malformed row: " \
           "category_id is '1' (a string), not an integer" in err
    assert "[coco_bad_value] images/train/w_text.png: annotations/instances_train.json, " \
           "image id 7: width is '80' (a string), not a number" in err
    assert "[coco_bad_value] images/train/w_nan.png: annotations/instances_train.json, " \
           "image id 8: width is NaN, not a finite number" in err
    assert "[coco_bad_value] images/train/h_inf.png: annotations/instances_train.json, " \
           "image id 9: height is Infinity, not a finite number" in err
    assert "[coco_bad_value] images/train/id_nan.png: annotations/instances_train.json, " \
           "images[10]: id is NaN, not an integer" in err
    assert "[coco_bad_value] images/train/w_zero.png: annotations/instances_train.json, " \
           "image id 11: width is 0, not above 0" in err
    assert "good.png" not in err

    # quarantined, every usable box is finite: train never sees a NaN
    params(in_tmp, source, on_error="quarantine")
    assert run_stage("validate", cwd=in_tmp).returncode == 0
    with open(in_tmp / "data/quarantine.csv", newline="") as f:
        quarantined = {r["path"] for r in csv.DictReader(f)}
    assert quarantined == {f"images/train/{n}.png" for n in names[1:]}


def test_a_bad_category_id_is_one_line_naming_the_file(in_tmp):
    source = in_tmp / "coco"
    write_image(source / "images/train/a.png", (80, 40), "RGB")
    text = json.dumps({"images": [{"id": 0, "file_name": "a.png", "width": 80, "height": 40}],
                       "annotations": [box(1, 0, [1, 1, 9, 9])],
                       "categories": [{"id": 1, "name": "ring"}, {"id": "@NaN@", "name": "x"}]})
    coco(source, [], [], text=text.replace('"@NaN@"', "NaN"))
    params(in_tmp, source)
    error = one_line_error(run_stage("ingest", cwd=in_tmp))
    assert "annotations/instances_train.json" in error and "categories[1]" in error
    assert "id is NaN, not an integer" in error
    (source / "annotations/instances_train.json").write_text(json.dumps(
        {"images": [{"id": 0, "file_name": "a.png"}], "annotations": ["not an object"]}))
    error = one_line_error(run_stage("ingest", cwd=in_tmp))
    assert "annotations/instances_train.json" in error and "annotations[0]" in error


# --- 4. duplicate image ids and file names, a declared size that is not the file's --------

def test_coco_duplicate_ids_files_and_sizes_have_their_own_checks(in_tmp):
    source = in_tmp / "coco"
    for name in ("a", "b", "c", "d", "good"):
        write_image(source / f"images/train/{name}.png", (80, 40), "RGB",
                    seed=ord(name[0]))
    images = [{"id": 1, "file_name": "a.png", "width": 80, "height": 40},
              {"id": 1, "file_name": "b.png", "width": 80, "height": 40},  # a's id again
              {"id": 2, "file_name": "c.png", "width": 80, "height": 40},
              {"id": 3, "file_name": "c.png", "width": 80, "height": 40},  # c listed twice
              {"id": 4, "file_name": "d.png", "width": 800, "height": 400},  # not 80x40
              {"id": 5, "file_name": "good.png", "width": 80, "height": 40}]
    anns = [box(1, 1, [10, 10, 20, 10]), box(2, 2, [10, 10, 20, 10]),
            box(3, 3, [30, 10, 20, 10]), box(4, 4, [100, 100, 20, 10]),
            box(5, 5, [10, 10, 20, 10])]
    coco(source, images, anns)
    params(in_tmp, source)
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    rows = manifest(in_tmp)
    # the first image does not silently keep (or give away) boxes of an ambiguous id
    assert rows["images/train/a.png"]["error_kind"] == "coco_duplicate_id"
    assert rows["images/train/b.png"]["error_kind"] == "coco_duplicate_id"
    proc = run_stage("validate", cwd=in_tmp)
    err = proc.stderr
    assert proc.returncode == 1 and "Traceback" not in err
    assert "[coco_duplicate_id] images/train/a.png: image id 1 is listed 2 times in " \
           "annotations/instances_train.json (a.png, b.png)" in err
    assert "[coco_duplicate_id] images/train/b.png: image id 1" in err
    assert "[coco_duplicate_file] images/train/c.png: listed 2 times in " \
           "annotations/instances_train.json (image ids 2, 3)" in err
    assert "[coco_size_mismatch] images/train/d.png: annotations/instances_train.json " \
           "declares 800x400 but the file is 80x40" in err
    assert "box_too_small" not in err and "box_outside" not in err
    assert "good.png" not in err


# --- 5. annotation files that are symlinks out of data.source ------------------------------

def read_notes(task: str, source: Path):
    """The task's read_annotations over ingest's own listing of source."""
    from stages.ingest import walk
    from stages.tasks import get

    from stages.lib.params import defaults

    task = get(task)
    return task.read_annotations(source, walk(source), task.read_settings(defaults()))


def refused(task: str, source: Path, name: str) -> str:
    """The one-line StageError read_annotations raises, which must name the file."""
    import pytest

    from stages.lib.io import StageError

    with pytest.raises(StageError) as info:
        read_notes(task, source)
    message = info.value.format_message()
    assert "\n" not in message and name in message and "outside data.source" in message, message
    return message


def test_annotation_symlinks_out_of_the_source_are_never_read(in_tmp):
    outside = in_tmp / "outside"
    outside.mkdir()
    (outside / "data.yaml").write_text("names: [stolen, names]\n")
    (outside / "passwd").write_text("0 0.5 0.5 0.2 0.2\n")
    yolo = in_tmp / "yolo"
    for name in ("a", "b", "c"):
        write_image(yolo / f"images/train/{name}.png", (64, 64), "RGB", seed=ord(name))
    (yolo / "labels/train").mkdir(parents=True)
    (yolo / "labels/train/a.txt").write_text("0 0.5 0.5 0.25 0.25\n")
    (yolo / "labels/train/b.txt").symlink_to(outside / "passwd")  # out: never read
    (yolo / "labels/train/c.txt").symlink_to("a.txt")  # a link inside the source is fine
    (yolo / "data.yaml").symlink_to(outside / "data.yaml")
    refused("detection", yolo, "data.yaml")
    params(in_tmp, yolo)
    error = one_line_error(run_stage("ingest", cwd=in_tmp))
    assert "data.yaml" in error and "stolen" not in error
    (yolo / "data.yaml").unlink()
    (yolo / "data.yaml").write_text("names: [ring, block]\n")
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    rows = manifest(in_tmp)
    b = rows["images/train/b.png"]
    assert b["error_kind"] == "symlink" and "labels/train/b.txt" in b["error"], b
    assert b["boxes"] in ("", "[]") and b["annotation_sha256"] == ""
    assert json.loads(rows["images/train/c.png"]["boxes"])[0][1] == "ring"
    assert rows["images/train/a.png"]["error"] == ""

    cocos = in_tmp / "coco"
    write_image(cocos / "images/train/a.png", (80, 40), "RGB")
    (outside / "instances_train.json").write_text(json.dumps({
        "images": [{"id": 1, "file_name": "a.png", "width": 80, "height": 40}],
        "annotations": [], "categories": []}))
    (cocos / "annotations").mkdir()
    (cocos / "annotations/instances_train.json").symlink_to(outside / "instances_train.json")
    refused("detection", cocos, "annotations/instances_train.json")

    seg = in_tmp / "seg"
    for name in ("a", "b"):
        write_image(seg / f"images/{name}.png", (16, 16), "RGB", seed=ord(name))
    (seg / "masks").mkdir()
    Image.new("L", (16, 16)).save(seg / "masks/a.png")
    Image.new("L", (16, 16), 1).save(outside / "mask.png")
    (seg / "masks/b.png").symlink_to(outside / "mask.png")
    notes = read_notes("segmentation", seg)
    assert notes.errors["images/b.png"][0] == "symlink"
    assert "masks/b.png" in notes.errors["images/b.png"][1]
    assert notes.values["images/b.png"]["mask_sha256"] == ""
    assert "images/a.png" not in notes.errors
    (outside / "classes.yaml").write_text("0: bg\n1: thing\n")
    (seg / "classes.yaml").symlink_to(outside / "classes.yaml")
    refused("segmentation", seg, "classes.yaml")
    nnunet = in_tmp / "nnunet"
    write_image(nnunet / "imagesTr/c_0000.png", (16, 16), "L")
    (outside / "dataset.json").write_text(json.dumps({"labels": {"background": 0, "x": 1}}))
    (nnunet / "dataset.json").symlink_to(outside / "dataset.json")
    refused("segmentation", nnunet, "dataset.json")

    ocr = in_tmp / "ocr"
    write_image(ocr / "a.png", (40, 32))
    (outside / "rec_gt.txt").write_text("a.png\thello\n")
    (ocr / "rec_gt.txt").symlink_to(outside / "rec_gt.txt")
    refused("ocr", ocr, "rec_gt.txt")
    (ocr / "rec_gt.txt").unlink()
    (outside / "lines.jsonl").write_text('{"path": "a.png", "text": "hi"}\n')
    (ocr / "lines.jsonl").symlink_to(outside / "lines.jsonl")
    refused("ocr", ocr, "lines.jsonl")
    (ocr / "lines.jsonl").unlink()
    (outside / "a.txt").write_text("secret")
    (ocr / "a.txt").symlink_to(outside / "a.txt")
    notes = read_notes("ocr", ocr)
    assert notes.errors["a.png"][0] == "symlink" and "a.txt" in notes.errors["a.png"][1]
    assert notes.values["a.png"]["text"] == ""

    folder = in_tmp / "classes"
    write_image(folder / "a.png")
    (outside / "labels.csv").write_text("path,label\na.png,cat\n")
    (folder / "labels.csv").symlink_to(outside / "labels.csv")
    refused("classification", folder, "labels.csv")


# --- 6. YAML alias bombs, huge and broken YAML ----------------------------------------------

def bomb(key: str, levels: int = 7) -> str:
    """A short YAML whose aliases expand to 9**levels values under key."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for k in range(1, levels):
        lines.append(f"l{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\n{key}: *l{levels - 1}\n"


def test_yaml_alias_bombs_huge_and_broken_yaml_are_one_line_naming_the_file(in_tmp):
    import time

    from stages.lib.io import StageError

    yolo = in_tmp / "yolo"
    write_image(yolo / "images/train/a.png", (32, 32), "RGB")
    params(in_tmp, yolo)
    data = yolo / "data.yaml"
    cases = {  # data.yaml text -> what the one line must say
        bomb("names"): "aliases",
        "names: &a [x, *a]\n": "alias",
        "names: [ring, block\n": "line 2",
        "names: [a]\n---\nnames: [b]\n": "single document",
        "names: !!python/object/apply:os.system [echo]\n": "tag",
        "# padding\n" * (1 << 19): "MiB",  # 5 MiB
    }
    for text, says in cases.items():
        data.write_text(text)
        start = time.monotonic()
        error = one_line_error(run_stage("ingest", cwd=in_tmp))
        assert time.monotonic() - start < 60
        assert f"{data}:" in error and says in error, (says, error)

    seg = in_tmp / "seg"
    write_image(seg / "images/a.png", (16, 16), "RGB")
    Image.new("L", (16, 16)).save((seg / "masks").mkdir() or seg / "masks/a.png")
    (seg / "classes.yaml").write_text(bomb("0"))
    try:
        read_notes("segmentation", seg)
        raise AssertionError("classes.yaml's alias bomb was read")
    except StageError as exc:
        assert "classes.yaml" in exc.format_message() and "aliases" in exc.format_message()

    # params.yaml too: every stage reads it first
    (in_tmp / "params.yaml").write_text((in_tmp / "params.yaml").read_text() + bomb("more", 8))
    error = one_line_error(run_stage("ingest", cwd=in_tmp))
    assert error.startswith("Error: params.yaml:") and "aliases" in error


# --- 7. malformed classes.yaml ----------------------------------------------------------------

def test_malformed_classes_yaml_is_one_line_naming_it(in_tmp):
    from stages.lib.io import StageError

    seg = in_tmp / "seg"
    write_image(seg / "images/a.png", (16, 16), "RGB")
    (seg / "masks").mkdir()
    Image.new("L", (16, 16), 1).save(seg / "masks/a.png")
    classes = seg / "classes.yaml"
    cases = {  # classes.yaml text -> what the one line must say besides naming the file
        "0: background\n1: disc\nignore: 1\n": "`ignore: 1` is also class 1 (disc)",
        "0: background\n1: disc\nignore: 300\n": "`ignore: 300` is not a mask value (0-255)",
        "0: background\n1: disc\nignore: none\n": "`ignore: 'none'` is not a mask value",
        "0: background\n1: [disc, ring]\n": "class 1's name is ['disc', 'ring'], not a name",
        "0: background\n1: {a: b}\n": "class 1's name is {'a': 'b'}, not a name",
        "0: background\n256: disc\n": "class 256 is not a mask value (0-255)",
        "0: background\n1: disc\n2: disc\n": "classes 1 and 2 are both named 'disc'",
        "0: background\n1: disc\n  2: box\n": "not valid YAML",
        "[background, disc]\n": "a mapping of class index to name",
    }
    for text, says in cases.items():
        classes.write_text(text)
        try:
            read_notes("segmentation", seg)
            raise AssertionError(f"accepted: {text!r}")
        except StageError as exc:
            message = exc.format_message()
            assert "\n" not in message and f"{classes}:" in message and says in message, \
                (says, message)
    # through the stage: one line, no traceback, no file quarantined for it
    params(in_tmp, seg, task="segmentation")
    classes.write_text("0: background\n1: [disc, ring]\n")
    assert "classes.yaml" in one_line_error(run_stage("ingest", cwd=in_tmp))
    classes.write_text("0: background\n1: disc\n: :\n  - [\n")
    assert "classes.yaml" in one_line_error(run_stage("ingest", cwd=in_tmp))
    classes.write_text("0: background\n1: disc\nignore: 255\n")
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    assert manifest(in_tmp)["images/a.png"]["error"] == ""

    # nnU-Net's dataset.json is held to the same rules
    nnunet = in_tmp / "nnunet"
    write_image(nnunet / "imagesTr/c_0000.png", (16, 16), "L")
    for labels, says in (({"background": 0, "x": 1, "ignore": 1}, "is also class 1 (x)"),
                         ({"background": 0, "x": "one"}, "not a mask value"),
                         ({"background": 0, "x": 1, "ignore": 999}, "not a mask value")):
        (nnunet / "dataset.json").write_text(json.dumps({"labels": labels}))
        try:
            read_notes("segmentation", nnunet)
            raise AssertionError(f"accepted: {labels}")
        except StageError as exc:
            assert "dataset.json" in exc.format_message() and says in exc.format_message(), \
                exc.format_message()
