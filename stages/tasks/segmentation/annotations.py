"""Where segmentation masks come from: two layouts, read at ingest.

images + masks: `<source>/images/<name>.<ext>` with `<source>/masks/<name>.png` (the same
relative path and stem), a single-channel (L) or palette (P) PNG whose values are class indices;
optional `<source>/classes.yaml` ({index: name}, plus `ignore: <value>`, 255 by default). With
the dataset's own split: `images/{train,val,test}/...` mirrored under `masks/`.

nnU-Net 2D: `<source>/dataset.json` (`labels`: {name: index} as in nnU-Net v2, or {index: name};
a label named `ignore` is the ignore value; `file_ending`, .png by default), `imagesTr/
CASE_0000<ending>` with `labelsTr/CASE<ending>` (split train), `imagesTs/` with `labelsTs/`
(split test). Only single-channel cases (_0000) are supported.

Every mask is decoded here: its sha256, size and per-value pixel counts join the image's manifest
row (so the split, the fingerprints and dvc.lock cover the labels); a mask problem is an error of
the image's row, a mask without an image a row of its own.
"""
import hashlib
import json
from pathlib import Path

import numpy as np

from stages.lib.io import StageError
from stages.lib.modality.imagegate import MAX_PIXELS
from stages.lib.userfiles import NOT_READ, check_inside, outside, read_yaml
from stages.tasks.base import Annotations

FIELDS = ("mask", "mask_sha256", "mask_size", "mask_values", "label_set")
SPLITS = ("train", "val", "test")
DEFAULT_IGNORE = 255


def shown(value) -> str:
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def mask_value(value) -> int | None:
    """value as a mask pixel value (0-255: masks are 8-bit), from an integer or a string of
    digits; None when it is not one."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
        return None
    return value


def declared(path, pairs, ignore) -> tuple[dict, int]:
    """({index: name}, ignore value) of the (index, name) pairs a label file gives; a one-line
    StageError naming the file for an index or ignore value that is not a mask value, a name
    that is not a string or number, a name given to two classes, an ignore value that is a
    class."""
    def fail(why: str):
        raise StageError(f"{path}: {why}.")

    names, owner = {}, {}
    for raw, name in pairs:
        index = mask_value(raw)
        if index is None:
            fail(f"class {shown(raw)} is not a mask value (0-255): a class is the value of its "
                 f"mask pixels")
        if isinstance(name, bool) or not isinstance(name, (str, int, float)):
            fail(f"class {index}'s name is {shown(name)}, not a name (a string)")
        name = str(name)
        if name in owner:
            fail(f"classes {owner[name]} and {index} are both named {name!r}: give each class "
                 f"its own name")
        names[index], owner[name] = name, index
    value = mask_value(ignore)
    if value is None:
        fail(f"`ignore: {shown(ignore)}` is not a mask value (0-255); the ignore value is the "
             f"mask pixel value that marks unlabelled pixels ({DEFAULT_IGNORE} by default)")
    if value in names:
        fail(f"`ignore: {value}` is also class {value} ({names[value]}): its pixels would be "
             f"both; choose an ignore value no class uses ({DEFAULT_IGNORE} by default)")
    return names, value


def read_label_set(source: Path) -> tuple[dict, int, str]:
    """({index: name} declared by the dataset ({} = the values found), ignore value, layout)."""
    dataset_json = source / "dataset.json"
    if dataset_json.is_file():
        try:
            spec = json.loads(check_inside(source, dataset_json).read_text())
            labels = spec["labels"]
            ending = spec.get("file_ending", ".png")
            if not isinstance(labels, dict) or not isinstance(ending, str):
                raise TypeError("`labels` must be a mapping, `file_ending` a string")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StageError(f"{dataset_json}: not an nnU-Net dataset.json with `labels` "
                             f"({exc}).") from None
        pairs, ignore = [], DEFAULT_IGNORE
        for key, value in labels.items():
            if str(key).lstrip("-").isdigit():  # {index: name} (nnU-Net v1)
                key, value = value, key
            if isinstance(value, list):  # nnU-Net v2 regions: not classes
                raise StageError(f"{dataset_json}: label {key} is a region {value}; only "
                                 f"plain class indices are supported.")
            if str(key) == "ignore":
                ignore = value
            else:
                pairs.append((value, key))
        return (*declared(dataset_json, pairs, ignore), "nnunet:" + ending)
    path = source / "classes.yaml"
    if not path.is_file():
        return {}, DEFAULT_IGNORE, "masks"
    raw = read_yaml(path, source)
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise StageError(f"{path}: expected a mapping of class index to name "
                         f"(and optionally `ignore: 255`), not {type(raw).__name__}.")
    ignore = raw.pop("ignore", DEFAULT_IGNORE)
    return (*declared(path, list(raw.items()), ignore), "masks")


def label_set_json(names: dict, ignore: int) -> str:
    return json.dumps({"names": {str(k): names[k] for k in sorted(names)}, "ignore": ignore},
                      separators=(",", ":"))


def read_mask(path: Path, name: str = "", max_pixels: int = MAX_PIXELS) -> dict:
    """{sha256, size "WxH", counts {value: pixels}} of a mask file, or {error_kind, error};
    name: the mask as the messages name it (its path under data.source). A mask whose header
    promises more than max_pixels (validate.max_pixels) is never decoded: mask_too_large, by
    our limit and never Pillow's own 178,956,970-pixel one (open_header lifts it)."""
    from stages.lib.modality.imagecore import open_header

    name = name or path.name
    try:
        data = path.read_bytes()
    except OSError as exc:
        return {"error_kind": "bad_mask", "error": f"mask {name}: cannot read "
                                                   f"({exc.strerror})"}
    out = {"sha256": hashlib.sha256(data).hexdigest()}
    if not data:
        return {**out, "error_kind": "bad_mask",
                "error": f"mask {name} is an empty file (0 bytes): re-export it as a "
                         f"single-channel PNG of class indices"}
    import io

    from stages.lib.modality.errors import decode_error

    try:
        with open_header(io.BytesIO(data)) as img:
            width, height = img.size
            if width * height > max_pixels:
                return {**out, "error_kind": "mask_too_large",
                        "error": f"mask {name} is {width}x{height} = {width * height} pixels, "
                                 f"over validate.max_pixels ({max_pixels}); never decoded: "
                                 f"raise validate.max_pixels in params.yaml if the mask is "
                                 f"genuine, or downscale the image and its mask"}
            img.load()
            mode, size = img.mode, img.size
            if mode not in ("L", "P"):
                return {**out, "error_kind": "mask_mode",
                        "error": f"mask is {mode} with {len(img.getbands())} band(s): it must "
                                 f"be single-channel (L) or indexed (P) with class indices as "
                                 f"values"}
            values = np.asarray(img)
    except Exception as exc:  # PIL raises many types on corrupt data
        return {**out, "error_kind": "bad_mask",
                "error": f"mask {name} cannot be decoded ({decode_error(exc)}): it is "
                         f"truncated, corrupt or not an image; re-export it as a "
                         f"single-channel PNG of class indices (or re-save the file)"}
    counts = np.bincount(values.ravel(), minlength=256)
    out.update(size=f"{size[0]}x{size[1]}",
               counts={int(v): int(counts[v]) for v in np.flatnonzero(counts)})
    return out


def pair_masks(rels: list, layout: str) -> tuple[dict, set, dict]:
    """({image path: (mask path, split)}, files that are masks or metadata, {image: error}) of
    the inventoried files."""
    files = set(rels)
    pairs, skip, errors = {}, {"classes.yaml", "dataset.json"} & files, {}
    if layout.startswith("nnunet:"):
        ending = layout.split(":", 1)[1]
        skip |= {r for r in files if r.startswith(("labelsTr/", "labelsTs/"))}
        for rel in sorted(files - skip):
            top, _, name = rel.partition("/")
            if top not in ("imagesTr", "imagesTs") or "/" in name:
                errors[rel] = "no_mask: not under imagesTr/ or imagesTs/"
                continue
            split = "train" if top == "imagesTr" else "test"
            if not name.endswith("_0000" + ending):
                errors[rel] = (f"no_mask: only single-channel 2D cases are supported "
                               f"(CASE_0000{ending})")
                continue
            case = name[:-len("_0000" + ending)]
            labels = "labelsTr" if top == "imagesTr" else "labelsTs"
            pairs[rel] = (f"{labels}/{case}{ending}", split)
        return pairs, skip, errors
    skip |= {r for r in files if r.startswith("masks/")}
    images = sorted(r for r in files - skip if r.startswith("images/"))
    tops = {r.split("/")[1] for r in images if r.count("/") >= 2}
    given = bool(images) and "train" in tops and all(
        r.count("/") >= 2 and r.split("/")[1] in SPLITS for r in images)
    for rel in sorted(files - skip):
        if not rel.startswith("images/"):
            errors[rel] = "no_mask: not under images/ (masks are looked up in masks/)"
            continue
        inner = rel[len("images/"):]
        stem = inner.rsplit(".", 1)[0] if "." in Path(inner).name else inner
        pairs[rel] = (f"masks/{stem}.png", inner.split("/")[0] if given else "")
    return pairs, skip, errors


def read_annotations(source: Path, listing: list, max_pixels: int = MAX_PIXELS) -> Annotations:
    names, ignore, layout = read_label_set(source)
    label_set = label_set_json(names, ignore)
    blank = dict.fromkeys((*FIELDS, "group", "timestamp", "split"), "")
    rels = [rel for rel, kind, _ in listing if kind == "file"]
    pairs, skip, errors = pair_masks(rels, layout)
    out = Annotations(skip=skip)
    files = set(rels)
    used = set()
    for rel, kind, _ in listing:
        if rel in skip:
            continue
        values = {**blank, "label_set": label_set}
        out.values[rel] = values
        if kind != "file":
            continue
        if rel in errors:
            out.errors[rel] = ("no_mask", errors[rel].split(": ", 1)[1])
            continue
        mask, values["split"] = pairs[rel]
        values["mask"] = mask
        if mask not in files:
            out.errors[rel] = ("no_mask", f"no mask: {mask} not found")
            continue
        used.add(mask)
        if outside(source, source / mask):
            out.errors[rel] = ("symlink", f"its mask {mask} is {NOT_READ}")
            continue
        facts = read_mask(source / mask, mask, max_pixels)
        values["mask_sha256"] = facts.get("sha256", "")
        if "error" in facts:
            out.errors[rel] = (facts["error_kind"], facts["error"])
            continue
        counts = facts["counts"]
        values["mask_size"] = facts["size"]
        values["mask_values"] = " ".join(f"{v}:{n}" for v, n in sorted(counts.items()))
        unknown = sorted(v for v in counts if v != ignore and names and v not in names)
        if unknown:
            out.errors[rel] = ("mask_values", f"mask {mask} holds value(s) "
                               f"{', '.join(map(str, unknown))} outside the classes "
                               f"{', '.join(map(str, sorted(names)))} and the ignore value "
                               f"{ignore}")
        elif set(counts) == {ignore}:
            out.errors[rel] = ("mask_all_ignore", f"mask {mask} is all ignore ({ignore}): "
                                                  f"nothing to learn or score")
    for mask in sorted(skip - used - {"classes.yaml", "dataset.json"}):
        out.values[mask] = {**blank, "label_set": label_set, "mask": mask}
        out.errors[mask] = ("orphan_mask", "mask without an image: no image has this stem")
        out.extra.append(mask)
    return out
