"""The single-label gate's own checks (classification, audio): labels, expected classes and
class balance."""
from collections import Counter

from stages.tasks.base import BLOCKING, DATASET

CHECKS = {
    "unlabelled": (BLOCKING, "a file with no label (outside a class folder, or not in "
                             "labels.csv)"),
    "missing": (BLOCKING, "a labels.csv row whose file is not under data.source"),
    "empty_folder": (BLOCKING, "a class folder with no files"),
    "unexpected_class": (BLOCKING, "a label not in validate.classes"),
    "missing_class": (DATASET, "a class of validate.classes with no usable image"),
    "min_per_class": (DATASET, "a class with fewer usable images than validate.min_per_class"),
    "imbalance": (DATASET, "largest class / smallest class above validate.max_imbalance"),
}


def label_counts(rows) -> dict:
    return dict(Counter(r["label"] for r in rows))


def check_columns(rows, ok, p) -> dict:
    return {"label": [r["label"] if g and r["label"] else None
                      for r, g in zip(rows, ok, strict=True)]}


def file_expectations(p) -> list:
    if not p.classes:
        return []
    import great_expectations as gx

    return [("unexpected_class", gx.expectations.ExpectColumnValuesToBeInSet(
        column="label", value_set=p.classes))]


def dataset_findings(usable, p, offenders) -> dict:
    import great_expectations as gx
    import pandas as pd

    per_class = Counter(r["label"] for r in usable)
    found = {}
    if per_class:
        e = gx.expectations
        largest = max(per_class.values())
        names = sorted(per_class)
        classes = pd.DataFrame({"label": names, "count": [per_class[c] for c in names],
                                "imbalance": [largest / per_class[c] for c in names]})
        suite = [("min_per_class", e.ExpectColumnValuesToBeBetween(
                     column="count", min_value=p.min_per_class)),
                 ("imbalance", e.ExpectColumnValuesToBeBetween(
                     column="imbalance", max_value=p.max_imbalance))]
        for check, failing in offenders(classes, suite, "label").items():
            if failing:
                found[check] = {c: (f"class {c} has {per_class[c]} usable images "
                                    f"(validate.min_per_class is {p.min_per_class})"
                                    if check == "min_per_class" else
                                    f"class {c} has {per_class[c]} images, {largest} in the "
                                    f"largest: ratio {largest / per_class[c]:.1f} > "
                                    f"validate.max_imbalance ({p.max_imbalance})")
                                for c in failing}
    missing = sorted(set(p.classes) - set(per_class))
    if missing:
        found["missing_class"] = {c: f"expected class {c} has no usable images" for c in missing}
    return found
