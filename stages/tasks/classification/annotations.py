"""Where classification labels come from: the class folder, or <source>/labels.csv.

ImageFolder: `<source>/<class>/<image>`; a file outside a class folder is unlabelled, an empty
class folder is an error of its own. With the dataset's own split, `<source>/<split>/<class>/
<image>` (every top-level folder is train, val or test, and train is there): the split goes to
the manifest's `split` column (used by split.by: given). labels.csv: `path,label` plus optional
`group`, `timestamp` and `split`; a file it does not list is unlabelled, a row without a file is
missing.
"""
import csv
import io
from pathlib import Path

from stages.lib.io import StageError
from stages.lib.userfiles import BOM_HELD, check_inside, utf8_text
from stages.tasks.base import Annotations

LABELS = "labels.csv"
SPLITS = ("train", "val", "test")
COLUMNS = ("label", "group", "timestamp", "split")
EMPTY_FOLDER = "empty class folder: it holds no files; remove it or add images"


def read_labels(root: Path) -> dict[str, dict] | None:
    """{path: {label, group, timestamp, split}} from <root>/labels.csv, or None when there is
    none. UTF-8, a leading byte-order mark dropped (userfiles.utf8_text)."""
    path = root / LABELS
    if not path.is_file():
        return None
    text = utf8_text(path, check_inside(root, path).read_bytes())
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    if not rows or not {"path", "label"} <= set(rows[0]):
        held = any("\ufeff" in str(k) for k in (rows[0] if rows else ()))
        raise StageError(f"{path}: needs a header with `path,label` (and optionally `group`, "
                         f"`timestamp`, `split`) and one row per image"
                         + (f"; its header holds {BOM_HELD}" if held else "") + ".")
    seen = {}
    for r in rows:
        if r["path"] in seen:
            raise StageError(f"{path}: `{r['path']}` is listed twice; keep one row per file.")
        seen[r["path"]] = {k: (r.get(k) or "").strip() for k in COLUMNS}
    return seen


def read_annotations(source: Path, listing: list) -> Annotations:
    labels = read_labels(source)
    out = Annotations(skip={LABELS} if labels is not None else set())
    blank = dict.fromkeys(COLUMNS, "")
    tops = {rel.partition("/")[0] for rel, _, _ in listing if rel not in out.skip}
    given = labels is None and "train" in tops and tops <= set(SPLITS)
    for rel, kind, _ in listing:
        if rel in out.skip:
            continue
        if given:  # <source>/<split>/<class>/<image>
            split, _, rest = rel.rstrip("/").partition("/")
            top, sep, _ = rest.partition("/")
            values = {**blank, "label": top if sep or (kind == "empty" and top) else "",
                      "split": split}
        elif labels is None:  # the class folder
            top, sep, _ = rel.rstrip("/").partition("/")
            values = {**blank, "label": top if sep or kind == "empty" else ""}
        else:
            values = labels.get(rel, blank)
        out.values[rel] = values
        if kind == "empty":
            out.errors[rel] = ("empty_folder", EMPTY_FOLDER)
        elif not values["label"]:
            out.errors[rel] = ("unlabelled", "unlabelled: not inside a class folder; move it to "
                                             + ("<source>/<split>/<class>/" if given
                                                else "<source>/<class>/") if labels is None
                               else f"unlabelled: no label in {LABELS}")
    listed = {rel for rel, _, _ in listing}
    for rel in sorted(set(labels or ()) - listed):
        out.values[rel] = labels[rel]
        out.errors[rel] = ("missing", f"missing: listed in {LABELS} but not found under "
                                      f"data.source"
                                      + (f"; its path holds {BOM_HELD}" if "\ufeff" in rel
                                         else ""))
        out.extra.append(rel)
    return out


def layout(found: Annotations) -> str:
    """What read_annotations read, in words (tools.init)."""
    if LABELS in found.skip:
        return f"{LABELS} (path,label)"
    split = any(v.get("split") for v in found.values.values())
    return "ImageFolder (" + ("<split>/" if split else "") + "<class>/<image>)"


def write_subset_labels(source: Path, dest: Path, found: Annotations, chosen: set) -> None:
    """tools.smoke's subset: labels.csv cut down to the chosen images (the rest of its rows
    would be `missing`); folder layouts need no annotation file."""
    from stages.lib.io import write_csv

    if LABELS not in found.skip:
        return
    rows = list(csv.DictReader(io.StringIO(utf8_text(source / LABELS,
                                                     (source / LABELS).read_bytes()),
                                           newline="")))
    write_csv(dest / LABELS, [r for r in rows if r["path"] in chosen], list(rows[0]))
