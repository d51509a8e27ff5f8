"""Where transcripts come from, in the order looked for under data.source:

1. `rec_gt.txt`, PaddleOCR's recognition list: one `relative/path<TAB>text` per line;
2. a JSONL file at the top (the first `*.jsonl` by name): one `{"path": ..., "text": ...}` per
   line, with optional string `group` (files sharing one never straddle splits: tools.synth_ocr
   writes the font there) and `split` (train, val or test, for split.by: given); other keys are
   ignored;
3. otherwise pairs: `x.png` (any image) beside `x.txt` holding its transcript (UTF-8; one final
   newline is dropped).

Every one is UTF-8; a byte-order mark at the start (of the file, or of a list's line) is dropped,
a UTF-16 or UTF-32 file is a `bad_list` naming its encoding.

The transcript and its SHA-256 go into the manifest (columns `text`, `text_sha256`), so the
split, the fingerprint and dvc.lock cover the labels. Problems become annotation errors of the
entry they concern, every one collected: a list that is not UTF-8 (named with its line numbers,
as a manifest row of the list itself), a malformed line, a path listed twice (every entry after
the first), a listed file that is not there, an image with no transcript. The text is kept as
written: whitespace is validate's warning, emptiness its error.
"""
import hashlib
import json
from pathlib import Path

from stages.lib.userfiles import BOM_HELD, NOT_READ, UTF8_BOM, check_inside, other_encoding, outside
from stages.tasks.base import Annotations

LIST = "rec_gt.txt"
BLANK = {"text": "", "text_sha256": "", "group": "", "timestamp": "", "split": ""}


OPTIONAL = ("group", "split")  # a JSONL line's optional keys that join the manifest


def text_values(text: str, extra=None) -> dict:
    return {**BLANK, **(extra or {}), "text": text,
            "text_sha256": hashlib.sha256(text.encode()).hexdigest()}


def parse_list(path: Path, kind: str):
    """({path: text}, {path: error} for second and later entries, [list problems]). A UTF-8
    byte-order mark at the start of a line is dropped (userfiles.UTF8_BOM); a UTF-16 or UTF-32
    list is one problem naming its encoding (no entries)."""
    entries, errors, problems, bad_lines = {}, {}, [], []
    data = path.read_bytes()
    if other_encoding(data):
        return entries, errors, [other_encoding(data)]
    for n, raw in enumerate(data.split(b"\n"), 1):
        raw = raw.removesuffix(b"\r").removeprefix(UTF8_BOM)
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            bad_lines.append(n)
            continue
        if kind == "list":
            rel, tab, text = line.partition("\t")
            extra = None
            if not tab:
                problems.append(f"line {n} has no TAB between path and text")
                continue
        else:
            try:
                item = json.loads(line)
                rel, text = item["path"], item["text"]
                extra = {k: item[k] for k in OPTIONAL if k in item}
                if not isinstance(rel, str) or not isinstance(text, str) or not all(
                        isinstance(v, str) for v in extra.values()):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                problems.append(f"line {n} is not a JSON object with string `path` and `text` "
                                f"(and, when there, string `group` and `split`)")
                continue
        rel = rel.strip().removeprefix("./")
        if rel in entries:
            errors.setdefault(rel, []).append(n)
            continue
        entries[rel] = (text, extra)
    if bad_lines:
        shown = ", ".join(map(str, bad_lines[:10])) + (" ..." if len(bad_lines) > 10 else "")
        problems.insert(0, f"not UTF-8 on {len(bad_lines)} line(s): {shown}; save it as UTF-8 "
                           f"(its entries there count as missing transcripts)")
    return entries, errors, problems


def read_annotations(source: Path, listing: list) -> Annotations:
    out = Annotations()
    names = {rel for rel, kind, _ in listing if kind == "file"}
    jsonl = sorted(rel for rel in names if "/" not in rel and rel.endswith(".jsonl"))
    list_file = LIST if LIST in names else jsonl[0] if jsonl else None
    if list_file is None:
        return pairs(source, listing, out)
    entries, duplicates, problems = parse_list(check_inside(source, source / list_file),
                                               "list" if list_file == LIST else "jsonl")
    out.skip.add(list_file)
    if problems:
        out.values[list_file] = dict(BLANK)
        out.errors[list_file] = ("bad_list", f"{list_file}: " + "; ".join(problems))
        out.extra.append(list_file)
    for rel, kind, _ in listing:
        if rel in out.skip:
            continue
        if rel in entries:
            out.values[rel] = text_values(*entries[rel])
        else:
            out.values[rel] = dict(BLANK)
            out.errors[rel] = ("unlabelled", f"unlabelled: not listed in {list_file}")
        if rel in duplicates:
            out.errors[rel] = ("duplicate_entry", f"listed more than once in {list_file} "
                               f"(lines {', '.join(map(str, duplicates[rel]))} repeat it)")
        elif kind == "empty":
            out.errors[rel] = ("unlabelled", "an empty folder")
    listed = {rel for rel, _, _ in listing}
    for rel in sorted(set(entries) - listed):
        out.values[rel] = text_values(*entries[rel])
        out.errors[rel] = ("missing", f"missing: listed in {list_file} but not found under "
                                      f"data.source"
                                      + (f"; its path holds {BOM_HELD}" if "\ufeff" in rel
                                         else ""))
        out.extra.append(rel)
    return out


def pairs(source: Path, listing: list, out: Annotations) -> Annotations:
    """x.png + x.txt: the transcript beside each image."""
    files = {rel for rel, kind, _ in listing if kind == "file"}
    texts = {rel for rel in files if rel.endswith(".txt")}
    out.skip |= texts
    images = {rel.rpartition(".")[0]: rel for rel in files - texts}
    for rel, kind, _ in listing:
        if rel in out.skip:
            continue
        txt = rel.rpartition(".")[0] + ".txt"
        if kind != "file" or txt not in texts:
            out.values[rel] = dict(BLANK)
            out.errors[rel] = ("unlabelled", f"unlabelled: no {Path(txt).name} beside it")
            continue
        if outside(source, source / txt):
            out.values[rel] = dict(BLANK)
            out.errors[rel] = ("symlink", f"its transcript {txt} is {NOT_READ}")
            continue
        try:
            data = (source / txt).read_bytes()
            if other_encoding(data):
                out.values[rel] = dict(BLANK)
                out.errors[rel] = ("bad_list", f"{Path(txt).name}: {other_encoding(data)}")
                continue
            out.values[rel] = text_values(data.removeprefix(UTF8_BOM).decode("utf-8")
                                          .removesuffix("\n").removesuffix("\r"))
        except UnicodeDecodeError as exc:
            out.values[rel] = dict(BLANK)
            out.errors[rel] = ("bad_list", f"{Path(txt).name} is not UTF-8 ({exc.reason} at "
                                           f"byte {exc.start})")
        except OSError as exc:  # a broken link, no permission
            out.values[rel] = dict(BLANK)
            out.errors[rel] = ("unreadable", f"its transcript {txt} cannot be read "
                                             f"({exc.strerror})")
    for txt in sorted(texts):
        if txt.rpartition(".")[0] not in images:
            out.values[txt] = dict(BLANK)
            out.errors[txt] = ("missing", "a transcript with no image beside it")
            out.extra.append(txt)
    return out
