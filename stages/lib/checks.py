"""Every validate check's name and kind, in one place: the shared checks here, a task's own in
its `checks`. validate, the quarantine, metrics/validation_checks.json and the reports all read them
from here, so a check's kind is never decided twice."""
from stages.tasks.base import BLOCKING, DATASET, WARNING

SHARED = {
    "empty": (BLOCKING, "a file of 0 bytes"),
    "undecodable": (BLOCKING, "a full decode of every frame fails (truncated, random bytes, "
                              "text)"),
    "format": (BLOCKING, "a format not in validate.formats"),
    "too_small": (BLOCKING, "width or height below validate.min_side"),
    "too_large": (BLOCKING, "more pixels than validate.max_pixels (never decoded)"),
    "symlink": (BLOCKING, "a symlink escaping the source, broken, in a loop, or a symlinked "
                          "folder"),
    "not_regular": (BLOCKING, "a FIFO, socket or device under the source: never opened"),
    "unreadable": (BLOCKING, "a file or folder that cannot be read (no permission, I/O error)"),
    "label_conflict": (BLOCKING, "the same bytes annotated differently: every copy"),
    "duplicate": (WARNING, "the same bytes, the same annotation: kept in one split"),
    "near_duplicate": (WARNING, "perceptual hashes within validate.near_dup_distance bits: "
                                "grouped with the nearest representative, in its split"),
    "mode": (WARNING, "CMYK, palette, 16-bit...: converted by the shared preprocessing"),
    "bit_depth": (WARNING, "more than 8 bits per sample: scaled to 8 bits"),
    "transparency": (WARNING, "an alpha channel: composited onto black"),
    "animated": (WARNING, "several frames: the first is used"),
    "extension": (WARNING, "content of another format than the extension says"),
}
# The error kinds ingest itself writes (a task adds its `annotation_errors`).
INGEST_ERRORS = ("empty", "undecodable", "too_large", "symlink", "not_regular", "unreadable")
OTHER = "error"  # a manifest error of a kind no check knows: blocking
OTHER_CHECK = (BLOCKING, "any other error in the manifest")


def all_checks(task) -> dict:
    """{check: (kind, description)}: shared, then the task's, then the catch-all."""
    return {**SHARED, **task.checks, OTHER: OTHER_CHECK}


def names(task, kind: str) -> list[str]:
    """The checks of one kind (blocking, warning, dataset), in all_checks' order."""
    return [name for name, (k, _) in all_checks(task).items() if k == kind]


def blocking(task) -> list[str]:
    return names(task, BLOCKING)


def warnings(task) -> list[str]:
    return names(task, WARNING)


def dataset(task) -> list[str]:
    return names(task, DATASET)
