"""The segmentation gate's own checks, after nnU-Net's integrity check and beyond it.

Ingest decodes every mask (annotations.py) and marks what is wrong with the pair; validate turns
those marks, the mask-vs-image size and the class coverage into named checks, every offender
collected before anything fails.
"""
import json
from collections import Counter

from stages.tasks.base import BLOCKING, DATASET

CHECKS = {
    "no_mask": (BLOCKING, "an image without a mask (or a file outside the layout's image "
                          "folders)"),
    "orphan_mask": (BLOCKING, "a mask without an image"),
    "bad_mask": (BLOCKING, "a mask that cannot be read or decoded"),
    "mask_too_large": (BLOCKING, "a mask with more pixels than validate.max_pixels (never "
                                 "decoded)"),
    "mask_mode": (BLOCKING, "a mask that is not single-channel (L) or indexed (P)"),
    "mask_values": (BLOCKING, "mask values outside the declared classes and the ignore value"),
    "mask_all_ignore": (BLOCKING, "a mask that is all ignore value"),
    "mask_size": (BLOCKING, "mask size differs from the image size"),
    "absent_class": (DATASET, "a declared class that appears in no training mask"),
}
ANNOTATION_ERRORS = ("no_mask", "orphan_mask", "bad_mask", "mask_too_large", "mask_mode",
                     "mask_values", "mask_all_ignore")


def label_set(row) -> tuple[dict, int]:
    """({index: name}, ignore value) of a row; names default to the index."""
    spec = json.loads(row.get("label_set") or '{"names": {}, "ignore": 255}')
    return {int(k): v for k, v in spec["names"].items()}, int(spec["ignore"])


def pixel_counts(row) -> dict:
    """{value: pixels} of a row's mask."""
    return {int(v): int(n) for v, n in (p.split(":") for p in row["mask_values"].split())}


def class_names(rows) -> list[str]:
    """Class names in index order: the declared ones, or the indices found (gaps named by
    their index)."""
    names, ignore = label_set(rows[0]) if rows else ({}, 255)
    found = {v for r in rows if r.get("mask_values") for v in pixel_counts(r) if v != ignore}
    top = max([*names, *found], default=0)
    return [names.get(i, str(i)) for i in range(top + 1)]


def label_counts(rows) -> dict:
    """{class name: images whose mask holds it}."""
    if not rows:
        return {}
    names, ignore = label_set(rows[0])
    counts = Counter()
    for r in rows:
        if r.get("mask_values"):
            counts.update(names.get(v, str(v)) for v in pixel_counts(r) if v != ignore)
    return dict(counts)


def check_columns(rows, ok, p) -> dict:
    def match(r, good):
        if not good or not r.get("mask_size") or not r.get("width"):
            return None
        return r["mask_size"] == f"{r['width']}x{r['height']}"

    return {"mask_size_match": [match(r, g) for r, g in zip(rows, ok, strict=True)]}


def file_expectations(p) -> list:
    import great_expectations as gx

    return [("mask_size", gx.expectations.ExpectColumnValuesToBeInSet(
        column="mask_size_match", value_set=[True]))]


def reason(check, row) -> str:
    if check != "mask_size":  # an ingest mark: its message
        return row["error"]
    return f"mask {row['mask']} is {row['mask_size']} but the image is {row['width']}x" \
           f"{row['height']}"


def dataset_findings(usable, p, offenders) -> dict:
    if not usable:
        return {}
    names, ignore = label_set(usable[0])
    train = [r for r in usable if r.get("split") in ("", "train") and r.get("mask_values")]
    seen = {v for r in train for v in pixel_counts(r)}
    absent = sorted(set(names) - seen)
    if not absent:
        return {}
    return {"absent_class": {names[i]: f"class {i} ({names[i]}) appears in no training mask "
                                       f"(of {len(train)}): the model could never learn it; "
                                       f"add examples or remove it from the class list"
                             for i in absent}}


def dataset_metrics(usable) -> dict:
    """validation.json's segmentation part: each class's share of the labelled pixels and of
    the images, over the usable rows."""
    rows = [r for r in usable if r.get("mask_values")]
    if not rows:
        return {}
    classes = class_names(rows)
    _, ignore = label_set(rows[0])
    pixels, images = Counter(), Counter()
    for r in rows:
        counts = pixel_counts(r)
        pixels.update(counts)
        images.update(counts.keys())
    labelled = sum(n for v, n in pixels.items() if v != ignore) or 1
    return {"segmentation": {
        "classes": classes, "ignore_index": ignore,
        "pixel_frequency": {c: round(pixels[i] / labelled, 6) for i, c in enumerate(classes)},
        "image_share": {c: round(images[i] / len(rows), 6) for i, c in enumerate(classes)},
        "ignored_pixels": pixels[ignore]}}
