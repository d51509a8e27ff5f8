"""Where detection labels come from: a YOLO tree or COCO json files.

YOLO: `images/<split>/<name>.<ext>` with `labels/<split>/<name>.txt` (rows `cls xc yc w h`,
normalised to 0-1) and `data.yaml` (`names`: a list, or a {id: name} mapping). An image with no
label file is background (no boxes); a label file with no image is a row of its own
(`orphan_label`).
COCO: `annotations/instances_<split>.json` plus the images, at `file_name` relative to the
source (or under `images/<split>/` or `<split>/`). Categories are matched by id, `iscrowd`
annotations are left out (neither truth nor error), an annotation of an unknown image id is a
row of its own (`coco_unknown_image`), a listed image that is not there is `missing`.

Every box becomes [where, label, xc, yc, w, h] (normalised floats) in the manifest's `boxes`
column (JSON): `where` is the label file's line number or "annotation <id>" (COCO), `label` the
class name, or `#<id>` for a class id not in the names. A row that cannot be read is
[where, "!", why]. validate judges them (checks.py); nothing here refuses a box.
`annotation_sha256` is the hash of the image's label file (YOLO) or of its annotations as
canonical JSON (COCO), "" when it has none.
"""
import hashlib
import json
import math
from pathlib import PurePosixPath

import yaml

from stages.lib.io import StageError
from stages.tasks.base import Annotations

SPLITS = ("train", "val", "test")
IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".pgm",
              ".ppm", ".pbm"}
BLANK = {"boxes": "[]", "annotation_sha256": "", "group": "", "timestamp": "", "split": ""}


def dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def read_names(path) -> dict:
    """{class id: name} from data.yaml's `names` (a list or a mapping)."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise StageError(f"{path}: cannot read it ({exc}); it needs `names: [...]`.") from None
    names = (data or {}).get("names") if isinstance(data, dict) else None
    if isinstance(names, list):
        return {i: str(n) for i, n in enumerate(names)}
    if isinstance(names, dict):
        return {int(k): str(v) for k, v in names.items()}
    raise StageError(f"{path}: `names` must be a list of class names or an {{id: name}} "
                     f"mapping.")


def parse_yolo(text: str, names: dict) -> list:
    """The boxes of one YOLO label file (see the module doc)."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 5:
            out.append([number, "!", f"{len(parts)} columns, not 5 (cls xc yc w h)"])
            continue
        try:
            values = [float(v) for v in parts[1:]]
            cls = int(parts[0])
        except ValueError:
            out.append([number, "!", f"not a number: {line.strip()[:60]}"])
            continue
        if not all(math.isfinite(v) for v in values):
            out.append([number, "!", f"not a finite number: {line.strip()[:60]}"])
            continue
        out.append([number, names.get(cls, f"#{parts[0]}"), *values])
    return out


def split_of(rel: str) -> str:
    parts = PurePosixPath(rel).parts
    for part in parts[:-1]:
        if part in SPLITS:
            return part
    return ""


def read_yolo(source, listing) -> Annotations:
    out = Annotations(skip={"data.yaml"})
    names = read_names(source / "data.yaml")
    files = {rel for rel, kind, _ in listing if kind == "file"}
    labels = {rel for rel in files if rel.startswith("labels/") and rel.endswith(".txt")}
    out.skip |= labels
    label_of = {}
    for rel, kind, _ in listing:
        if kind != "file" or rel in out.skip:
            continue
        values = {**BLANK, "split": split_of(rel)}
        if rel.startswith("images/"):
            label = "labels/" + str(PurePosixPath(rel[len("images/"):]).with_suffix(".txt"))
            label_of[label] = rel
            if label in labels:
                data = (source / label).read_bytes()
                values["annotation_sha256"] = hashlib.sha256(data).hexdigest()
                values["boxes"] = dumps(parse_yolo(data.decode("utf-8", "replace"), names))
            else:
                values["boxes"] = ""  # no label file: background (validate: no_labels)
        out.values[rel] = values
    for label in sorted(labels - set(label_of)):
        out.extra.append(label)
        out.values[label] = {**BLANK, "split": split_of(label)}
        out.errors[label] = ("orphan_label", "a label file with no image (expected "
                             + str(PurePosixPath("images", *PurePosixPath(label).parts[1:])
                                   .with_suffix(".*")) + ")")
    return out


def find_image(file_name: str, split: str, files: set) -> str | None:
    for rel in (file_name, f"images/{split}/{file_name}", f"{split}/{file_name}",
                f"images/{file_name}"):
        if rel in files:
            return rel
    return None


def read_coco(source, listing, jsons) -> Annotations:
    out = Annotations(skip=set(jsons))
    files = {rel for rel, kind, _ in listing if kind == "file"}
    for rel, kind, _ in listing:
        if kind == "file" and rel not in out.skip:
            out.values[rel] = {**BLANK, "split": split_of(rel), "boxes": ""}
    for js in sorted(jsons):
        split = PurePosixPath(js).stem.removeprefix("instances_")
        try:
            data = json.loads((source / js).read_text())
            images = {int(im["id"]): im for im in data.get("images", [])}
            categories = {int(c["id"]): str(c["name"]) for c in data.get("categories", [])}
            annotations = data.get("annotations", [])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StageError(f"{source / js}: not a COCO instances file ({exc}).") from None
        per_image = {i: [] for i in images}
        for ann in annotations:
            image_id = ann.get("image_id")
            if image_id not in images:
                key = f"{js}#annotation={ann.get('id')}"
                out.extra.append(key)
                out.values[key] = {**BLANK, "split": split if split in SPLITS else ""}
                out.errors[key] = ("coco_unknown_image", f"annotation {ann.get('id')} refers "
                                                         f"to image id {image_id}, not in images")
                continue
            per_image[image_id].append(ann)
        for image_id, im in sorted(images.items()):
            rel = find_image(str(im.get("file_name", "")), split, files)
            anns = sorted(per_image[image_id], key=lambda a: a.get("id", 0))
            if rel is None:
                key = str(im.get("file_name", f"{js}#image={image_id}"))
                out.extra.append(key)
                out.values[key] = {**BLANK, "split": split if split in SPLITS else ""}
                out.errors[key] = ("missing", f"listed in {js} (image id {image_id}) with "
                                              f"{len(anns)} annotations, but not found")
                continue
            w, h = float(im.get("width") or 0), float(im.get("height") or 0)
            boxes = []
            for ann in anns:
                if ann.get("iscrowd"):
                    continue
                cat = int(ann.get("category_id", -1))
                label = categories.get(cat, f"#{cat}")
                try:
                    x, y, bw, bh = (float(v) for v in ann["bbox"])
                    if not w or not h:
                        raise ValueError("the image has no width/height")
                except (KeyError, ValueError, TypeError) as exc:
                    boxes.append([f"annotation {ann.get('id')}", "!", f"bad bbox: {exc}"])
                    continue
                boxes.append([f"annotation {ann.get('id')}", label, (x + bw / 2) / w,
                              (y + bh / 2) / h, bw / w, bh / h])
            canonical = dumps([{k: a[k] for k in sorted(a)} for a in anns]).encode()
            out.values[rel].update(
                boxes=dumps(boxes), split=split if split in SPLITS else "",
                annotation_sha256=hashlib.sha256(canonical).hexdigest() if anns else "")
    return out


def read_annotations(source, listing) -> Annotations:
    files = {rel for rel, kind, _ in listing if kind == "file"}
    jsons = sorted(rel for rel in files
                   if rel.startswith("annotations/instances_") and rel.endswith(".json"))
    if jsons:
        return read_coco(source, listing, jsons)
    if "data.yaml" in files:
        return read_yolo(source, listing)
    raise StageError(f"{source}: not a detection dataset: it needs data.yaml (YOLO: "
                     f"images/<split>/, labels/<split>/*.txt) or "
                     f"annotations/instances_<split>.json (COCO).")
