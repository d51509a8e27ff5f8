"""Reading the files a user hands the pipeline (annotation files, YAML) without trusting them.

An annotation file is read only when it, followed through every symlink, lies inside the data
folder: ingest already refuses images that link outside it (a dataset that links to
/etc/passwd or to another project's class names must not pull them in).
"""
from pathlib import Path

from stages.lib.io import StageError

OUTSIDE = "a symlink to a file outside data.source"
NOT_READ = f"{OUTSIDE}: not read; copy the file in instead of linking to it"


def escapes(root, path) -> bool:
    """Whether path, followed through every symlink (in any component), ends outside root.
    RuntimeError or OSError on a symlink loop."""
    return not Path(path).resolve().is_relative_to(Path(root).resolve())


def outside(root, path) -> bool:
    """escapes(), with a symlink loop counted as outside (it can be read from nowhere)."""
    try:
        return escapes(root, path)
    except (OSError, RuntimeError):
        return True


def check_inside(root, path) -> Path:
    """path, or a one-line StageError naming it when it links outside root (the data folder):
    for an annotation file the whole dataset depends on (data.yaml, a COCO json,
    classes.yaml, dataset.json, an OCR list, labels.csv)."""
    path = Path(path)
    if outside(root, path):
        raise StageError(f"{path}: {OUTSIDE} (ingest reads no annotation file from outside "
                         f"it); copy the file into data.source instead of linking to it.")
    return path
