"""Issue 29, item 1: `split.by: given` on data with its own train and val but no test (most YOLO
and COCO releases) keeps train and val and carves a seeded test split out of train, by the
hash rule over train's groups: groups (labels.csv `group`, exact copies, near-duplicates) stay
whole, the choice is stable as the data grows, and the split stage says so. No init needed."""
import json

import numpy as np
import yaml

from stages.ingest import build_manifest, manifest_fields
from stages.lib.io import read_csv, write_csv
from stages.split import plan
from tests.conftest import run_stage, write_image


def release(root, train=60, val=12, groups=10):
    """<root>/labels.csv with a split column of train and val only; the first `groups` pairs
    of train files share a `group` (two shots of one object), and each of the first 5 train
    files has a brightened near-duplicate in train. 32x32 smooth grey images, 2 classes."""
    from tests.lookalike import basis

    b = basis(32, 6)
    rng = np.random.default_rng(0)
    rows = []
    for split, n in (("train", train), ("val", val)):
        for i in range(n):
            rel = f"{split}/{i:03d}.png"
            pixels = np.clip(128 + 30 * (b.T @ rng.normal(0, 1, (6, 6)) @ b), 0, 255)
            write_grey(root / rel, pixels)
            group = f"g{i // 2}" if split == "train" and i < 2 * groups else ""
            rows.append({"path": rel, "label": "ab"[i % 2], "group": group, "split": split})
            if split == "train" and i < 5:
                write_grey(root / f"train/{i:03d}_bright.png", np.clip(pixels + 12, 0, 255))
                rows.append({"path": f"train/{i:03d}_bright.png", "label": "ab"[i % 2],
                             "group": "", "split": "train"})
    write_csv(root / "labels.csv", rows, ["path", "label", "group", "split"])
    return rows


def write_grey(path, pixels):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.astype("uint8"), "L").save(path)


def test_test_is_carved_from_train_groups_whole_seeded_and_stable(tmp_path):
    release(tmp_path / "raw")
    rows = build_manifest(tmp_path / "raw", 2)
    where, keys = plan(rows, 42, 0.15, 0.2, "given", 4)
    test = {p for p, s in where.items() if s == "test"}
    assert test and all(p.startswith("train/") for p in test)  # carved from train only
    assert {p for p, s in where.items() if s == "val"} == {
        r["path"] for r in rows if r["split"] == "val"}  # val kept whole, nothing carved
    assert 0.1 < len(test) / sum(r["split"] == "train" for r in rows) < 0.35
    by_group = {}
    for r in rows:  # labels.csv groups, and near-duplicates (grouped by phash), never straddle
        by_group.setdefault(keys[r["path"]], set()).add(where[r["path"]])
    assert all(len(s) == 1 for s in by_group.values())
    sizes = {k: sum(keys[r["path"]] == k for r in rows) for k in by_group}
    assert any(sizes[keys[p]] > 1 for p in test)  # a group did go to test, whole
    for i in range(5):
        assert where[f"train/{i:03d}.png"] == where[f"train/{i:03d}_bright.png"]
    for i in range(0, 20, 2):
        assert where[f"train/{i:03d}.png"] == where[f"train/{i + 1:03d}.png"]
    assert plan(rows, 42, 0.15, 0.2, "given", 4)[0] == where  # the same rule every time
    other, _ = plan(rows, 7, 0.15, 0.2, "given", 4)
    assert {p for p, s in other.items() if s == "test"} != test  # the seed picks it

    grown = build_manifest(tmp_path / "raw", 2) + [  # new train files: no old file moves
        {**rows[0], "path": f"train/new{i}.png", "sha256": f"{i:064x}", "phash": "",
         "group": ""} for i in range(20)]
    again, _ = plan(grown, 42, 0.15, 0.2, "given", 4)
    assert all(again[p] == s for p, s in where.items())


def test_data_with_val_and_test_of_its_own_is_kept_as_is(tmp_path):
    rows = release(tmp_path / "raw")
    for r in rows[-4:]:
        r["split"] = "test"
    write_csv(tmp_path / "raw/labels.csv", rows, ["path", "label", "group", "split"])
    manifest = build_manifest(tmp_path / "raw", 2)
    where, _ = plan(manifest, 42, 0.15, 0.2, "given", 4)
    assert where == {r["path"]: r["split"] for r in rows}


def test_split_stage_carves_test_says_so_and_records_it(tmp_path):
    from stages.tasks import default_task

    rows = release(tmp_path / "raw")
    manifest = build_manifest(tmp_path / "raw", 2)
    root = tmp_path / "project"
    write_csv(root / "data/manifest.csv", manifest, manifest_fields(default_task()))
    write_csv(root / "data/quarantine.csv", [], ["path", "reason"])
    (root / "params.yaml").write_text(yaml.safe_dump({"split": {"by": "given", "test": 0.2}}))
    proc = run_stage("split", cwd=root)
    assert proc.returncode == 0, proc.stderr  # before: "the test split is empty"
    test = {r["path"] for r in read_csv(root / "data/split/test.csv")}
    assert test and all(p.startswith("train/") for p in test)
    val = {r["path"] for r in read_csv(root / "data/split/val.csv")}
    assert val == {r["path"] for r in rows if r["split"] == "val"}
    metrics = json.loads((root / "metrics/split.json").read_text())
    assert metrics["carved"] == {"test": len(test)}
    assert (f"split: the data has no test split of its own: {len(test)} files carved from "
            f"train as test (split.test 0.2 of train's groups") in proc.stdout


def test_yolo_folders_with_train_and_val_only_get_a_test_split(tmp_path):
    """The detection layout of the issue: images/{train,val}/ and labels/, no test/."""
    from stages.tasks import get

    src = tmp_path / "yolo"
    (src / "labels/train").mkdir(parents=True)
    (src / "labels/val").mkdir(parents=True)
    (src / "data.yaml").write_text("names: [ring]\n")
    for split, n in (("train", 30), ("val", 5)):
        for i in range(n):
            write_image(src / f"images/{split}/{i}.png", (32, 32), "RGB", seed=i + 100 * n)
            (src / f"labels/{split}/{i}.txt").write_text("0 0.5 0.5 0.3 0.3\n")
    manifest = build_manifest(src, 2, task=get("detection"))
    where, _ = plan(manifest, 42, 0.15, 0.15, "given", 4)
    test = sorted(p for p, s in where.items() if s == "test")
    assert test and all(p.startswith("images/train/") for p in test)
    assert sorted(p for p, s in where.items() if s == "val") == [f"images/val/{i}.png"
                                                                for i in range(5)]
