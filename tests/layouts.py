"""Tiny datasets in every layout tools.init reads (issue 29), written as a user would have them:
real image files, seeded, small enough for a whole pipeline run in seconds.

Each writer returns what init should find there: the layout it names, the split mode it
chooses, and the prepare settings it fits."""
import json
from pathlib import Path

import numpy as np
from PIL import Image

from tests.conftest import write_image


def image(path, size, mode, seed):
    """A seeded random image (write_image) of (width, height) and mode L or RGB."""
    return write_image(path, size, mode, seed=seed)


def mask(path, values):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(values, dtype=np.uint8), "L").save(path)


def blob_mask(side, seed):
    """Background 0, a square of class 1 and one of class 2, at seeded places."""
    rng = np.random.default_rng(seed)
    m = np.zeros((side, side), dtype=np.uint8)
    for value in (1, 2):
        top, left = rng.integers(0, side - side // 3, 2)
        m[top:top + side // 3, left:left + side // 3] = value
    return m


def imagefolder(root: Path) -> dict:
    """<class>/<image>: 3 classes of 48x48 RGB, no split of its own."""
    for c, name in enumerate(("cat", "dog", "fox")):
        for i in range(8):
            image(root / name / f"{i}.png", (48, 48), "RGB", 100 * c + i)
    return {"task": "classification", "layout": "ImageFolder (<class>/<image>)", "by": "hash",
            "prepare": {"image_size": 48, "channels": 3, "mean": "auto", "std": "auto"}}


def labels_csv(root: Path) -> dict:
    """labels.csv with a split column holding train and val only (no test), 40x30 grey."""
    rows = ["path,label,split"]
    for c, name in enumerate(("a", "b")):
        for i in range(14):
            rel = f"pics/{name}{i:02d}.png"
            image(root / rel, (40, 30), "L", 50 * c + i)
            rows.append(f"{rel},{name},{'val' if i >= 11 else 'train'}")
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    return {"task": "classification", "layout": "labels.csv (path,label)", "by": "given",
            "carved": ["test"], "prepare": {"image_size": 32, "channels": 1}}


def yolo(root: Path) -> dict:
    """YOLO with its own train and val folders and no test, as most releases ship; 96x64 RGB,
    3 classes from data.yaml."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "data.yaml").write_text("names: [ring, block, star]\n")
    for split, count in (("train", 24), ("val", 6)):
        for i in range(count):
            image(root / f"images/{split}/{i:03d}.png", (96, 64), "RGB", 1000 + i
                  + (500 if split == "val" else 0))
            label = root / f"labels/{split}/{i:03d}.txt"
            label.parent.mkdir(parents=True, exist_ok=True)
            x, y = 0.2 + 0.02 * (i % 20), 0.3 + 0.01 * (i % 30)
            label.write_text(f"{i % 3} {x:.3f} {y:.3f} 0.25 0.3\n{(i + 1) % 3} 0.7 0.6 0.2 0.2\n")
    return {"task": "detection", "layout": "YOLO (class names from data.yaml)", "by": "given",
            "carved": ["test"],
            "prepare": {"image_size": 96, "channels": 3, "mean": "auto", "std": "auto"}}


def coco(root: Path) -> dict:
    """COCO: annotations/instances_{train,val,test}.json beside images/<split>/; 64x48 RGB."""
    categories = [{"id": 1, "name": "car"}, {"id": 2, "name": "bus"}]
    (root / "annotations").mkdir(parents=True)
    for split, count in (("train", 12), ("val", 4), ("test", 4)):
        images, anns = [], []
        for i in range(count):
            name = f"{split}{i:02d}.png"
            image(root / f"images/{split}/{name}", (64, 48), "RGB", 2000 + 100 * len(split) + i)
            images.append({"id": i, "file_name": name, "width": 64, "height": 48})
            anns.append({"id": 10 * i + 1, "image_id": i, "category_id": 1 + i % 2,
                         "bbox": [8 + i % 5, 6, 20, 16], "iscrowd": 0})
            anns.append({"id": 10 * i + 2, "image_id": i, "category_id": 2 - i % 2,
                         "bbox": [36, 20 + i % 4, 18, 14], "iscrowd": 0})
        (root / f"annotations/instances_{split}.json").write_text(json.dumps(
            {"images": images, "annotations": anns, "categories": categories}))
    return {"task": "detection", "layout": "COCO (annotations/instances_<split>.json)",
            "by": "given", "carved": [], "prepare": {"image_size": 64, "channels": 3}}


def masks(root: Path) -> dict:
    """images/<name>.png + masks/<name>.png with classes.yaml, 40x40 RGB, no split."""
    (root / "classes.yaml").parent.mkdir(parents=True, exist_ok=True)
    (root / "classes.yaml").write_text("0: background\n1: disc\n2: box\n")
    for i in range(16):
        image(root / f"images/{i:02d}.png", (40, 40), "RGB", 3000 + i)
        mask(root / f"masks/{i:02d}.png", blob_mask(40, i))
    return {"task": "segmentation", "layout": "images + masks (classes from classes.yaml)",
            "by": "hash", "prepare": {"image_size": 40, "channels": 3}}


def nnunet(root: Path) -> dict:
    """nnU-Net 2D: imagesTr/labelsTr (train) and imagesTs/labelsTs (test), 32x32 grey."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "dataset.json").write_text(json.dumps({
        "channel_names": {"0": "grey"}, "labels": {"background": 0, "disc": 1, "box": 2},
        "numTraining": 14, "file_ending": ".png"}))
    for folder, labels, count in (("imagesTr", "labelsTr", 14), ("imagesTs", "labelsTs", 4)):
        for i in range(count):
            image(root / f"{folder}/case{i:02d}_0000.png", (32, 32), "L", 4000 + 50 * len(folder)
                  + i + (20 if folder == "imagesTs" else 0))
            mask(root / f"{labels}/case{i:02d}.png", blob_mask(32, 100 + i + 20 * (count < 10)))
    return {"task": "segmentation", "layout": "nnU-Net 2D", "by": "given", "carved": ["val"],
            "prepare": {"image_size": 32, "channels": 1}}


def ocr_list(root: Path) -> dict:
    """rec_gt.txt (path<TAB>text) over 100x20 grey line images, no split."""
    rng = np.random.default_rng(5)
    entries = []
    for i in range(30):
        text = "".join(rng.choice(list("abcdef0123"), int(rng.integers(2, 7))))
        rel = f"lines/{i:03d}.png"
        image(root / rel, (100, 20), "L", 5000 + i)
        entries.append(f"{rel}\t{text}\n")
    (root / "rec_gt.txt").write_text("".join(entries))
    return {"task": "ocr", "layout": "rec_gt.txt line list (path<TAB>text)", "by": "hash",
            "prepare": {"height": 32, "width": 160, "channels": 1}}


LAYOUTS = {"imagefolder": imagefolder, "labels_csv": labels_csv, "yolo": yolo, "coco": coco,
           "masks": masks, "nnunet": nnunet, "ocr_list": ocr_list}
