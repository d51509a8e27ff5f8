"""Where audio labels come from: a folder per class (Speech Commands: `yes/*.wav`), or a list
`labels.tsv` of `path<TAB>label` lines.

Speech Commands' own files at the top (`validation_list.txt`, `testing_list.txt`: one path per
line) give the dataset's own split: the listed files are val and test, the rest train (used by
split.by: given); README/LICENSE files and `_background_noise_/` (long noise recordings, not a
class) are skipped. A speaker id, the file name's part before `_nohash_` (Speech Commands:
`0a7c2a8d_nohash_0.wav`), becomes the group, so that no speaker straddles train and test.
"""
from pathlib import Path

from stages.lib.io import StageError
from stages.lib.userfiles import check_inside, utf8_text
from stages.tasks.base import Annotations

LIST = "labels.tsv"
SPLIT_LISTS = {"validation_list.txt": "val", "testing_list.txt": "test"}
SKIP_FOLDERS = ("_background_noise_",)
SKIP_FILES = ("README.md", "README.txt", "LICENSE", "LICENSE.txt", ".DS_Store")
EMPTY_FOLDER = "empty class folder: it holds no files; remove it or add clips"
NOHASH = "_nohash_"


def speaker(rel: str) -> str:
    """The speaker id of a Speech Commands file name (before `_nohash_`), or ""."""
    name = rel.rsplit("/", 1)[-1]
    return name.split(NOHASH, 1)[0] if NOHASH in name else ""


def read_list(root: Path) -> dict[str, str] | None:
    """{path: label} from <root>/labels.tsv (`path<TAB>label` per line; blank lines and
    `#` comments skipped), or None when there is none."""
    path = root / LIST
    if not path.is_file():
        return None
    out = {}
    text = utf8_text(path, check_inside(root, path).read_bytes())
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        rel, tab, label = line.partition("\t")
        if not tab or not rel.strip():
            raise StageError(f"{path}:{number}: expected `path<TAB>label`, got {line!r}.")
        if rel in out:
            raise StageError(f"{path}:{number}: `{rel}` is listed twice; keep one line per "
                             f"file.")
        out[rel] = label.strip()
    return out


def read_splits(root: Path) -> dict[str, str]:
    """{path: split} from Speech Commands' validation_list.txt and testing_list.txt."""
    out = {}
    for name, split in SPLIT_LISTS.items():
        path = root / name
        if path.is_file():
            for line in utf8_text(path, check_inside(root, path).read_bytes()).splitlines():
                if line.strip():
                    out[line.strip()] = split
    return out


def read_annotations(source: Path, listing: list) -> Annotations:
    labels = read_list(source)
    splits = read_splits(source)
    skip = set(SPLIT_LISTS) | set(SKIP_FILES) | ({LIST} if labels is not None else set())
    out = Annotations(skip={LIST} if labels is not None else set())
    for rel, kind, _ in listing:
        top, sep, _rest = rel.rstrip("/").partition("/")
        if rel in skip or (sep and top in SKIP_FOLDERS) or (kind == "empty" and top in
                                                            SKIP_FOLDERS):
            out.skip.add(rel)
            continue
        if labels is None:
            label = top if sep or kind == "empty" else ""
        else:
            label = labels.get(rel, "")
        split = (splits.get(rel, "train") if splits else "")
        out.values[rel] = {"label": label, "group": speaker(rel), "timestamp": "",
                           "split": split}
        if kind == "empty":
            out.errors[rel] = ("empty_folder", EMPTY_FOLDER)
        elif not label:
            out.errors[rel] = ("unlabelled", "unlabelled: not inside a class folder; move it to "
                                             "<source>/<class>/" if labels is None
                               else f"unlabelled: no label in {LIST}")
    listed = {rel for rel, _, _ in listing}
    for rel in sorted(set(labels or ()) - listed):
        out.values[rel] = {"label": labels[rel], "group": speaker(rel), "timestamp": "",
                           "split": ""}
        out.errors[rel] = ("missing", f"missing: listed in {LIST} but not found under "
                                      f"data.source")
        out.extra.append(rel)
    return out


def layout(found: Annotations) -> str:
    """What read_annotations read, in words (tools.init)."""
    what = f"{LIST} (path<TAB>label)" if LIST in found.skip else "a folder per class"
    if any(v.get("split") for v in found.values.values()):
        what += " with the dataset's own split (validation_list.txt, testing_list.txt)"
    if any(v.get("group") for v in found.values.values()):
        what += "; speakers (the name before _nohash_) grouped"
    return what


def write_subset_list(source: Path, dest: Path, found: Annotations, chosen: set) -> None:
    """tools.smoke's subset: labels.tsv cut down to the chosen clips, and the split lists."""
    from stages.lib.io import write_bytes

    if LIST in found.skip:
        lines = [f"{rel}\t{label}" for rel, label in read_list(source).items() if rel in chosen]
        write_bytes(dest / LIST, ("\n".join(lines) + "\n").encode())
    for name in SPLIT_LISTS:
        if (source / name).is_file():
            kept = [line for line in (source / name).read_text().splitlines()
                    if line.strip() in chosen]
            write_bytes(dest / name, ("\n".join(kept) + "\n").encode())
