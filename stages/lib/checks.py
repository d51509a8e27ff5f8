"""Every data check the validate stage runs: its name, its kind and what it catches, in one place.

The kind decides what a finding does:

- `blocking`: the file must not be trained on (the pipeline stops, or the file is quarantined);
- `warning`: the file is odd but usable and is used;
- `dataset`: a class-level problem that quarantining files cannot fix, so it always stops.

validate takes its check lists from here and the run report labels each check with its kind
from here, so neither imports the other. The order of CHECKS is the order checks are listed
in (failure messages, pages); `register` lets a task add its own.
"""
BLOCKING, WARNING, DATASET = "blocking", "warning", "dataset"
KINDS = (BLOCKING, WARNING, DATASET)

# {name: (kind, one line on what a finding means)}, in the order checks are listed.
CHECKS: dict[str, tuple[str, str]] = {
    "empty": (BLOCKING, "the file has 0 bytes"),
    "undecodable": (BLOCKING, "a full decode fails: truncated, random bytes, text"),
    "format": (BLOCKING, "the image format is not in validate.formats"),
    "too_small": (BLOCKING, "width or height below validate.min_side"),
    "too_large": (BLOCKING, "more than validate.max_pixels pixels (never decoded)"),
    "symlink": (BLOCKING, "a symlink escaping data.source, broken, or to a folder"),
    "unlabelled": (BLOCKING, "the file has no label"),
    "missing": (BLOCKING, "labels.csv names a file that does not exist"),
    "empty_folder": (BLOCKING, "a class folder without files"),
    "label_conflict": (BLOCKING, "the same bytes under two labels (every copy)"),
    "unexpected_class": (BLOCKING, "a label not in validate.classes"),
    "error": (BLOCKING, "any other error ingest recorded"),
    "duplicate": (WARNING, "the same bytes, the same label: kept in one split"),
    "near_duplicate": (WARNING, "phash within validate.near_dup_distance bits: kept in one "
                                "split"),
    "mode": (WARNING, "not L or RGB (CMYK, palette...): converted by the preprocessing"),
    "bit_depth": (WARNING, "more than 8 bits per channel: scaled to 8 bits"),
    "transparency": (WARNING, "an alpha channel: composited onto black"),
    "animated": (WARNING, "more than one frame: the first is used"),
    "extension": (WARNING, "the extension names another format: decoded by content"),
    "missing_class": (DATASET, "a class of validate.classes has no usable images"),
    "min_per_class": (DATASET, "a class has fewer than validate.min_per_class usable images"),
    "imbalance": (DATASET, "largest class / a class exceeds validate.max_imbalance"),
}


def register(name: str, kind: str, description: str) -> None:
    """Add a check (a task's own); it is listed after the checks already declared."""
    if kind not in KINDS:
        raise ValueError(f"check {name!r}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if name in CHECKS:
        raise ValueError(f"check {name!r} is already declared")
    CHECKS[name] = (kind, description)


def all_checks() -> dict[str, tuple[str, str]]:
    """{name: (kind, description)} of every check, in declaration order (a copy)."""
    return dict(CHECKS)


def names(kind: str) -> list[str]:
    """The names of every check of one kind, in declaration order."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return [name for name, (k, _) in CHECKS.items() if k == kind]


def blocking() -> list[str]:
    return names(BLOCKING)


def warnings() -> list[str]:
    return names(WARNING)


def dataset() -> list[str]:
    return names(DATASET)
