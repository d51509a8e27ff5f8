"""The detection gate's own checks, over a table with one row per box (great_expectations).

Every box of every usable image is a row; each check is one expectation returning every
offending box, and an image is blocked by its worst box. The reason names each offending box
(the label file's line, or the COCO annotation id). Nothing is ever rewritten on disk.
"""
import json

from stages.lib.show import number
from stages.tasks.base import BLOCKING, WARNING

CHECKS = {
    "orphan_label": (BLOCKING, "a YOLO label file with no image"),
    "missing": (BLOCKING, "a COCO image entry whose file is not under data.source"),
    "coco_unknown_image": (BLOCKING, "a COCO annotation whose image id is not in `images`"),
    "coco_bad_value": (BLOCKING, "a COCO image entry whose id, width or height is NaN, "
                                 "Infinity, a string or missing (width, height: above 0)"),
    "coco_duplicate_id": (BLOCKING, "a COCO image id listed by two image entries: every "
                                    "image listing it (whose boxes would they be?)"),
    "coco_duplicate_file": (BLOCKING, "a file listed by two COCO image entries"),
    "coco_size_mismatch": (BLOCKING, "a COCO image entry's width/height differs from the "
                                     "file's (its boxes would be scaled wrong)"),
    "malformed_box": (BLOCKING, "a label row with the wrong column count or not a finite number "
                                "(COCO: a bbox or category_id that is NaN, Infinity or a string, "
                                "an iscrowd not 0 or 1, an area below 0 or not a number, a "
                                "segmentation neither polygons nor an RLE)"),
    "unknown_class": (BLOCKING, "a class id not in data.yaml's names / COCO's categories (or "
                                "not in validate.classes)"),
    "box_outside": (BLOCKING, "box corners outside [0, 1] (the image) beyond "
                              "validate.box_tolerance"),
    "box_degenerate": (BLOCKING, "zero or negative width or height"),
    "box_too_small": (BLOCKING, "a box side under validate.min_box_px pixels"),
    "duplicate_box": (BLOCKING, "the same box twice in one image (same class and coordinates)"),
    "too_many_boxes": (BLOCKING, "an image with more boxes than validate.max_boxes (a YOLO "
                                 "label file's lines, a COCO image's annotations)"),
    "unlabelled": (BLOCKING, "an image with no label file, with validate.require_labels"),
    "no_labels": (WARNING, "an image with no boxes (background): counted, kept"),
}
BOX_CHECKS = ("malformed_box", "unknown_class", "box_outside", "box_degenerate",
              "box_too_small", "duplicate_box")


def size_matches(row) -> bool | None:
    """Whether a COCO row's declared size is its file's (None: nothing declared, YOLO)."""
    if not row.get("declared_size") or not row.get("width"):
        return None
    return row["declared_size"] == f"{row['width']}x{row['height']}"


def size_reason(row) -> str:
    where = (f"annotations/instances_{row['split']}.json" if row.get("split")
             else "its COCO image entry")
    return (f"{where} declares {row['declared_size']} but the file is {row['width']}x"
            f"{row['height']}: fix the entry's width and height (its boxes are scaled by them)")


def boxes_of(row) -> list:
    return json.loads(row["boxes"]) if row.get("boxes") else []


def box_frame(rows, ok, p):
    """(pandas frame with one row per box of the usable images, [(file path, where)])."""
    import pandas as pd

    records, where = [], []
    for r, good in zip(rows, ok, strict=True):
        if not good:
            continue
        w, h = float(r["width"] or 0), float(r["height"] or 0)
        for box in boxes_of(r):
            key = len(records)
            where.append((r["path"], box[0]))
            if box[1] == "!":
                records.append({"box": key, "malformed": 1, "label": None, "note": box[2]})
                continue
            _, label, xc, yc, bw, bh = box
            records.append({
                "box": key, "malformed": 0, "label": label,
                "x1": xc - bw / 2, "y1": yc - bh / 2, "x2": xc + bw / 2, "y2": yc + bh / 2,
                "w": bw, "h": bh, "w_px": bw * w if bw > 0 else None,
                "h_px": bh * h if bh > 0 else None,
                "same": f"{r['path']}\t{label}\t{xc:.6f}\t{yc:.6f}\t{bw:.6f}\t{bh:.6f}"})
    columns = ["box", "malformed", "label", "x1", "y1", "x2", "y2", "w", "h", "w_px", "h_px",
               "same", "note"]
    return pd.DataFrame(records, columns=columns), where


def box_suite(p, names):
    import great_expectations as gx

    e = gx.expectations
    lo, hi = -p.box_tolerance, 1 + p.box_tolerance
    return [
        ("malformed_box", e.ExpectColumnValuesToBeBetween(column="malformed", max_value=0)),
        ("unknown_class", e.ExpectColumnValuesToBeInSet(column="label", value_set=names)),
        *[("box_outside", e.ExpectColumnValuesToBeBetween(column=c, min_value=lo,
                                                          max_value=hi))
          for c in ("x1", "y1", "x2", "y2")],
        *[("box_degenerate", e.ExpectColumnValuesToBeBetween(column=c, min_value=0,
                                                             strict_min=True))
          for c in ("w", "h")],
        *[("box_too_small", e.ExpectColumnValuesToBeBetween(column=c,
                                                            min_value=p.min_box_px))
          for c in ("w_px", "h_px")],
        ("duplicate_box", e.ExpectColumnValuesToBeUnique(column="same")),
    ]


def box_findings(rows, ok, p) -> dict:
    """{check: {file path: [(where, why)]}} over the box table."""
    from stages.lib.checks import offenders

    frame, where = box_frame(rows, ok, p)
    if not len(frame):
        return {}
    known = sorted({lab for lab in frame["label"].dropna() if not str(lab).startswith("#")})
    names = list(p.classes) or known
    pairs = box_suite(p, names)  # box_outside etc. have several expectations
    hits = {}
    for (check, _), boxes in zip(pairs, _run(frame, pairs, offenders), strict=True):
        hits.setdefault(check, set()).update(boxes)
    found = {}
    for check, boxes in hits.items():
        for b in sorted(boxes):
            path, at = where[b]
            found.setdefault(check, {}).setdefault(path, []).append(
                (at, why(check, frame.iloc[b], p)))
    return found


def _run(frame, pairs, offenders):
    """offenders() of each (check, expectation), in order: each gets its own name, so
    several expectations of one check are kept apart."""
    named = [(f"{check}#{k}", exp) for k, (check, exp) in enumerate(pairs)]
    result = offenders(frame, named, "box")
    return [result[name] for name, _ in named]


def why(check, box, p) -> str:
    if check == "malformed_box":
        return f"malformed row: {box['note']}"
    if check == "unknown_class":
        return f"class {box['label']} not in the names" + (" (validate.classes)"
                                                           if p.classes else "")
    coords = "(" + ", ".join(number(box[k]) for k in ("x1", "y1", "x2", "y2")) + ")"
    if check == "box_outside":
        return f"box {coords} outside [0, 1] beyond validate.box_tolerance {p.box_tolerance}"
    if check == "box_degenerate":
        return f"width {number(box['w'])} / height {number(box['h'])}: not positive"
    if check == "box_too_small":
        return (f"box of {number(box['w_px'], '.1f')}x{number(box['h_px'], '.1f')} px, under "
                f"validate.min_box_px {p.min_box_px}")
    return f"duplicate box {box['label']} {coords}"
