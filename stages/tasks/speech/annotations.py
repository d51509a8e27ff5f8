"""Where transcripts come from, in the order looked for under data.source:

1. `transcripts.txt` at the top: one `relative/path<TAB>transcript` per line, optionally
   `<TAB>speaker` after it (the speaker becomes the file's group);
2. Common Voice: `train.tsv`, `dev.tsv` and `test.tsv` at the top (the dataset's own split; dev
   is val), or `validated.tsv` alone (no split). Tab-separated with a header naming `path`,
   `sentence` and `client_id` (the speaker: the group); `path` is relative to `clips/` when that
   folder is there, else to data.source. Clips listed only in Common Voice's other lists
   (other.tsv, invalidated.tsv...) are left out, with a warning counting them;
3. LibriSpeech: `*.trans.txt` files anywhere, one `ID transcript` per line, the audio `ID.flac`
   (or .wav, .ogg) beside it; the speaker is the ID's first field (`19` of `19-198-0000`), and a
   folder named like `train-clean-100`, `dev-other` or `test-clean` on the way gives the split.

Every file is UTF-8; a byte-order mark at the start (of the file or a line) is dropped, a UTF-16
or UTF-32 file is a `bad_list` naming its encoding. The transcript and its SHA-256 go into the
manifest (`text`, `text_sha256`), the speaker into `group` (so no speaker straddles train and
test), the given split into `split`. Problems become annotation errors of the entry concerned,
every one collected: a malformed list, a path listed twice (every entry after the first), a
listed file that is not there (`missing`), an audio file with no transcript (`unlabelled`). The
text is kept as written: emptiness and invisible or unknown characters are validate's checks.
"""
import csv
import hashlib
import io
import re
from pathlib import Path

from stages.lib.userfiles import BOM_HELD, UTF8_BOM, check_inside, other_encoding
from stages.tasks.base import Annotations

LIST = "transcripts.txt"
CV_SPLITS = {"train.tsv": "train", "dev.tsv": "val", "test.tsv": "test"}
CV_ALL = "validated.tsv"
CV_COLUMNS = ("path", "sentence", "client_id")
LIBRI_SUFFIX = ".trans.txt"
LIBRI_AUDIO = (".flac", ".wav", ".ogg")
LIBRI_SPLIT = re.compile(r"(train|dev|test)(-.*)?")
SPLIT_NAMES = {"train": "train", "dev": "val", "test": "test"}
BLANK = {"text": "", "text_sha256": "", "group": "", "timestamp": "", "split": ""}


def text_values(text: str, group: str = "", split: str = "") -> dict:
    return {**BLANK, "text": text, "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "group": group, "split": split}


def decoded(path: Path):
    """(lines as [(line number, text)], [problems]) of a UTF-8 annotation file: a byte-order
    mark dropped, lines that are not UTF-8 named (their entries then count as unlabelled)."""
    data = path.read_bytes()
    if other_encoding(data):
        return [], [other_encoding(data)]
    lines, bad = [], []
    for n, raw in enumerate(data.split(b"\n"), 1):
        raw = raw.removesuffix(b"\r").removeprefix(UTF8_BOM)
        if not raw.strip():
            continue
        try:
            lines.append((n, raw.decode("utf-8")))
        except UnicodeDecodeError:
            bad.append(n)
    problems = []
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (" ..." if len(bad) > 10 else "")
        problems.append(f"not UTF-8 on {len(bad)} line(s): {shown}; save it as UTF-8")
    return lines, problems


class Entries:
    """What a layout's files list: {path: values}, {path: [line refs]} of repeats, problems
    {annotation file: [problems]}."""

    def __init__(self):
        self.values, self.repeats, self.problems = {}, {}, {}

    def add(self, rel: str, ref: str, values: dict) -> None:
        if rel in self.values:
            self.repeats.setdefault(rel, []).append(ref)
        else:
            self.values[rel] = values

    def problem(self, name: str, message: str) -> None:
        self.problems.setdefault(name, []).append(message)


def read_list(source: Path, entries: Entries) -> None:
    lines, problems = decoded(check_inside(source, source / LIST))
    for message in problems:
        entries.problem(LIST, message)
    for n, line in lines:
        fields = line.split("\t")
        if len(fields) not in (2, 3):
            entries.problem(LIST, f"line {n} is not path<TAB>transcript[<TAB>speaker]")
            continue
        rel = fields[0].strip().removeprefix("./")
        speaker = fields[2].strip() if len(fields) == 3 else ""
        entries.add(rel, f"{LIST} line {n}", text_values(fields[1], speaker))


def read_common_voice(source: Path, names: set, entries: Entries) -> set:
    """Common Voice's lists into entries; the clips its other lists name (left out)."""
    chosen = [n for n in CV_SPLITS if n in names] or [CV_ALL]
    base = "clips/" if (source / "clips").is_dir() else ""
    for name in chosen:
        lines, problems = decoded(check_inside(source, source / name))
        for message in problems:
            entries.problem(name, message)
        if not lines:
            continue
        _, header = lines[0]
        columns = header.split("\t")
        if not set(CV_COLUMNS) <= set(columns):
            lacking = ", ".join(c for c in CV_COLUMNS if c not in columns)
            entries.problem(name, f"its header has no {lacking} column (Common Voice's lists "
                                  f"name path, sentence and client_id)")
            continue
        at = {c: columns.index(c) for c in CV_COLUMNS}
        for n, line in lines[1:]:
            fields = line.split("\t")
            if len(fields) != len(columns):
                entries.problem(name, f"line {n} has {len(fields)} fields, the header "
                                      f"{len(columns)}")
                continue
            rel = base + fields[at["path"]].strip()
            entries.add(rel, f"{name} line {n}",
                        text_values(fields[at["sentence"]], fields[at["client_id"]].strip(),
                                    CV_SPLITS.get(name, "")))
    others = set()
    for name in sorted(n for n in names if "/" not in n and n.endswith(".tsv")
                       and n not in chosen):
        try:
            rows = csv.DictReader(io.StringIO(source.joinpath(name).read_text("utf-8-sig")),
                                  delimiter="\t", quoting=csv.QUOTE_NONE)
            others |= {base + (r.get("path") or "").strip() for r in rows}
        except (OSError, UnicodeDecodeError, csv.Error):
            continue  # a list we do not read: its clips count as unlabelled
    return others - set(entries.values)


def read_librispeech(source: Path, names: set, entries: Entries) -> None:
    stems = {}
    for rel in names:
        stem, dot, ext = rel.rpartition(".")
        if dot and f".{ext.lower()}" in LIBRI_AUDIO:
            stems.setdefault(stem, rel)
    for name in sorted(n for n in names if n.endswith(LIBRI_SUFFIX)):
        folder = name.rpartition("/")[0]
        split = next((SPLIT_NAMES[m.group(1)] for part in folder.split("/")
                      if (m := LIBRI_SPLIT.fullmatch(part))), "")
        lines, problems = decoded(check_inside(source, source / name))
        for message in problems:
            entries.problem(name, message)
        for n, line in lines:
            key, _, text = line.partition(" ")
            if not key or "/" in key:
                entries.problem(name, f"line {n} is not `ID transcript`")
                continue
            stem = f"{folder}/{key}" if folder else key
            rel = stems.get(stem, stem + LIBRI_AUDIO[0])
            entries.add(rel, f"{name} line {n}", text_values(text, key.split("-")[0], split))


def layout_of(names: set) -> str:
    """list, common_voice, librispeech or "" (none found) of the files at data.source."""
    if LIST in names:
        return "list"
    if any(n in names for n in (*CV_SPLITS, CV_ALL)):
        return "common_voice"
    if any(n.endswith(LIBRI_SUFFIX) for n in names):
        return "librispeech"
    return ""


def annotation_files(layout: str, names: set) -> set:
    if layout == "list":
        return {LIST}
    if layout == "common_voice":
        return {n for n in names if "/" not in n and n.endswith(".tsv")}
    return {n for n in names if n.endswith(LIBRI_SUFFIX)}


def read_annotations(source: Path, listing: list) -> Annotations:
    out = Annotations()
    names = {rel for rel, kind, _ in listing if kind == "file"}
    layout = layout_of(names)
    entries, left_out = Entries(), set()
    if layout == "list":
        read_list(source, entries)
    elif layout == "common_voice":
        left_out = read_common_voice(source, names, entries)
    elif layout == "librispeech":
        read_librispeech(source, names, entries)
    out.skip |= annotation_files(layout, names) | (left_out & names)
    for name, problems in sorted(entries.problems.items()):  # a row of the list itself
        out.values[name] = dict(BLANK)
        out.errors[name] = ("bad_list", f"{name}: " + "; ".join(problems))
        out.extra.append(name)
    where = {"list": LIST, "common_voice": "the Common Voice lists",
             "librispeech": "any *.trans.txt beside it"}.get(layout, "")
    for rel, kind, _ in listing:
        if rel in out.skip or rel in out.values:
            continue
        if rel in entries.values:
            out.values[rel] = entries.values[rel]
        else:
            out.values[rel] = dict(BLANK)
            out.errors[rel] = ("unlabelled", f"unlabelled: not listed in {where}" if where else
                               f"unlabelled: no transcript list ({LIST}, Common Voice's "
                               f"train/dev/test.tsv or LibriSpeech's *.trans.txt)")
        if rel in entries.repeats:
            out.errors[rel] = ("duplicate_entry",
                               f"listed more than once ({', '.join(entries.repeats[rel])} "
                               f"repeat it)")
        elif kind == "empty":
            out.errors[rel] = ("unlabelled", "an empty folder")
    listed = {rel for rel, _, _ in listing}
    for rel in sorted(set(entries.values) - listed):
        out.values[rel] = entries.values[rel]
        out.errors[rel] = ("missing", "missing: listed but not found under data.source"
                           + (f"; its path holds {BOM_HELD}" if "\ufeff" in rel else ""))
        out.extra.append(rel)
    if left_out:
        shown = ", ".join(sorted(left_out)[:3]) + (" ..." if len(left_out) > 3 else "")
        out.warnings.append(("left_out", f"{len(left_out)} clip(s) that only Common Voice's "
                                         f"other lists name are left out ({shown})"))
    return out


def write_subset(source: Path, dest: Path, found: Annotations, chosen: set) -> None:
    """tools.smoke's subset: every annotation file of the layout cut down to the lines of the
    chosen clips (a list's, Common Voice's header kept, LibriSpeech's per chapter), so the
    subset reads as its source does, its speakers and its own split included."""
    from stages.lib.io import write_bytes

    names = set(found.skip) | set(found.values)
    layout = layout_of(names)
    base = "clips/" if (source / "clips").is_dir() else ""
    for name in sorted(annotation_files(layout, names)):
        lines, _ = decoded(check_inside(source, source / name))
        if layout == "list":
            kept = [line for _, line in lines
                    if line.split("\t")[0].strip().removeprefix("./") in chosen]
        elif layout == "common_voice":
            if not lines or name not in (*CV_SPLITS, CV_ALL):
                continue
            columns = lines[0][1].split("\t")
            at = columns.index("path") if "path" in columns else 0
            kept = [lines[0][1]] + [line for _, line in lines[1:] if len(line.split("\t")) > at
                                    and base + line.split("\t")[at].strip() in chosen]
        else:
            folder = name.rpartition("/")[0]
            prefix = f"{folder}/" if folder else ""
            kept = [line for _, line in lines
                    if any(f"{prefix}{line.partition(' ')[0]}{ext}" in chosen
                           for ext in LIBRI_AUDIO)]
        if kept:
            write_bytes(dest / name, ("\n".join(kept) + "\n").encode())
