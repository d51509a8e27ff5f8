"""predict's output file (--out): its rows, format and columns, resumed across restarts.

Each batch's rows are written unbuffered and fsynced before the next batch starts, so a run
killed at any moment loses at most the batch in flight. Before a byte of an existing --out
changes it must be recognisably ours (check_ours): a torn last line is then cut
(repair_torn_tail), the paths it already holds are skipped (pending), and rows of another
model are refused (check_model): one file never mixes models.
"""
import errno
import json
import os
import sys
from pathlib import Path

from stages.lib.io import StageError, replace_file

STDOUT = Path("-")
REGISTRY_FIELDS = ("artifact", "artifact_version", "stage", "commit", "data_version")


def output_fields(model) -> list[str]:
    """The columns of the output: path, the task's prediction fields, error, model
    (classification: path, label, score, topk, error, model). `model` is the model version
    (stages.lib.model.provenance.model_version: the ONNX metadata's model_version). A registered
    model's rows (--model NAME#prod) also name its artifact, version, stage, commit and data
    version (REGISTRY_FIELDS, tools.registry.models.fields)."""
    registry = list(REGISTRY_FIELDS) if getattr(model, "registry", None) else []
    return ["path", *model.task.prediction_fields, "error", "model", *registry]


def legacy_fields(fields: list[str]) -> list[str]:
    """The columns predict wrote before rows carried the model version."""
    return [f for f in fields if f != "model"]

def output_format(out: Path, fmt: str | None) -> str:
    """--format, else csv for an --out ending in .csv, else jsonl."""
    return fmt or ("csv" if out.suffix.lower() == ".csv" else "jsonl")


def check_ours(path: Path, fmt: str, fields: list[str]) -> int:
    """Refuse (StageError) an existing --out that is not recognisably a predict output of this
    model in this format, before a byte of it changes; return the length of its torn last
    line (0 when it ends with a newline), which only then may be cut.

    Ours: empty; CSV whose first line is exactly our header; JSONL whose every complete line
    is a JSON object with exactly our fields. A torn tail must look like the start of one of
    our lines (the header, or `{"path": `)."""
    def refuse(why: str):
        raise StageError(f"{path}: not a predict output of this model ({why}); it was not "
                         f"changed. Choose another --out.")

    header = ",".join(fields) + "\n"
    headers = (header, ",".join(legacy_fields(fields)) + "\n")
    first_row = json.dumps({"path": ""})[:9]  # '{"path": '
    complete = 0
    try:
        with open(path, "rb") as f:
            lineno = 0
            for line in f:
                if not line.endswith(b"\n"):
                    break  # the torn tail
                lineno += 1
                complete += len(line)
                text = line.decode("utf-8")
                if fmt == "csv":
                    if lineno == 1 and text not in headers:
                        refuse(f"its first line is not the CSV header {header.strip()!r}")
                else:
                    try:
                        row = json.loads(text)
                    except json.JSONDecodeError:
                        row = None
                    if not isinstance(row, dict) or sorted(row) not in (
                            sorted(fields), sorted(legacy_fields(fields))):
                        refuse(f"line {lineno} is not a JSONL row with the fields "
                               f"{', '.join(fields)}")
            f.seek(complete)
            tail = f.read()
    except UnicodeDecodeError:
        refuse("it is not UTF-8 text")
    except OSError as exc:
        raise StageError(f"{path}: cannot read --out ({exc.strerror}); make it readable or "
                         f"choose another --out.") from None
    if tail:
        start = header.encode() if fmt == "csv" and complete == 0 else (
            b"" if fmt == "csv" else first_row.encode())
        if not (start.startswith(tail) or tail.startswith(start)):
            refuse("its last line is not the start of a predict row")
    return len(tail)


def repair_torn_tail(path: Path) -> int:
    """Truncate a partial last line (a run killed mid-write); return the bytes removed."""
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        pos, keep = size, 0
        while pos > 0:
            step = min(1 << 16, pos)
            pos -= step
            f.seek(pos)
            newline = f.read(step).rfind(b"\n")
            if newline >= 0:
                keep = pos + newline + 1
                break
        if keep < size:
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
    return size - keep


def read_rows(path: Path, fmt: str, fields: list[str]):
    """Rows of an existing output file (after repair_torn_tail)."""
    import csv

    with open(path, encoding="utf-8", newline="") as f:
        if fmt == "csv":
            reader = csv.DictReader(f)
            if reader.fieldnames and reader.fieldnames not in (fields, legacy_fields(fields)):
                raise StageError(f"{path}: not a predict CSV of this model (header "
                                 f"{reader.fieldnames}, expected {fields}); choose another "
                                 f"--out.")
            yield from reader
            return
        for lineno, line in enumerate(f, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                row = None
            if not isinstance(row, dict) or "path" not in row:
                raise StageError(f"{path}:{lineno}: not a predict JSONL row; choose another "
                                 f"--out (or --format csv for a CSV file).")
            yield row


def format_row(row: dict, fmt: str, fields: list[str]) -> str:
    """One output line. In CSV, None is empty and lists or dicts are JSON; a row read back from
    a CSV (all strings) is written back unchanged."""
    if fmt == "jsonl":
        return json.dumps({k: row[k] for k in fields}, ensure_ascii=False) + "\n"
    import csv
    import io

    def cell(value):
        if value is None:
            return ""
        return json.dumps(value, ensure_ascii=False) if isinstance(value, (list, dict)) else value

    buf = io.StringIO()
    csv.DictWriter(buf, fields, lineterminator="\n").writerow({k: cell(row[k]) for k in fields})
    return buf.getvalue()


def drop_failed_rows(path: Path, fmt: str, fields: list[str]) -> list[str]:
    """Rewrite the output atomically without its error rows (through a symlink, its target,
    with its mode: stages.lib.io.replace_file); return their paths, in order."""
    failed = []
    with replace_file(path) as f:
        if fmt == "csv":
            f.write((",".join(fields) + "\n").encode())
        for row in read_rows(path, fmt, fields):
            if row["error"]:
                failed.append(row["path"])
                continue
            f.write(format_row(row, fmt, fields).encode("utf-8"))
    return failed


def write_all(f, data: bytes) -> None:
    """Write every byte on an unbuffered file, then fsync: nothing is left in a buffer that a
    later close would try (and, on a full disk, fail) to flush."""
    view = memoryview(data)
    while view:
        view = view[f.write(view):]
    os.fsync(f.fileno())


def open_output(out: Path, fmt: str, fields: list[str]):
    """Unbuffered append handle on --out; a new CSV file gets its header (durably) first."""
    out.parent.mkdir(parents=True, exist_ok=True)
    f = open(out, "ab", buffering=0)
    if fmt == "csv" and f.tell() == 0:
        try:
            write_all(f, (",".join(fields) + "\n").encode())
        except BaseException:
            f.close()
            raise
    return f

def pending(paths, out, done: set, failed_before: set, counts: dict):
    """The inputs still to predict, in order: each path once, --out itself and the paths
    already in --out skipped (counted in counts)."""
    out_abs = None if out == STDOUT else os.path.abspath(out)
    for path in paths:
        if os.path.abspath(path) == out_abs:  # `predict . --out p.jsonl`: not an input
            continue
        if path in done or path in failed_before:
            counts["skipped_failed" if path in failed_before else "skipped"] += 1
            continue
        done.add(path)  # a path listed twice gets one row
        yield path


def check_model(out: Path, fmt: str, fields: list[str], version: str) -> None:
    """Refuse an --out holding rows of another model (or of a predict that did not record
    the model): one file never mixes models."""
    for row in read_rows(out, fmt, fields):
        theirs = row.get("model") or ""
        # rows written before the version was the hash's prefix carry the whole sha256
        if theirs != version and not (len(theirs) == 64 and theirs.startswith(version)):
            what = (f"model {theirs[:12]}" if theirs else
                    "a model predict did not record (rows written before predict recorded "
                    "model versions)")
            raise StageError(f"{out}: holds predictions of {what}; this model is "
                             f"{version[:12]} ({out} was not changed). Pass --overwrite to "
                             f"replace them, or choose another --out.")


class StdoutRows:
    """--out -: rows to stdout as they come (a CSV header first); nothing to restart."""

    def __init__(self, fmt: str, fields: list[str]):
        self.fmt, self.fields, self.header = fmt, fields, fmt == "csv"

    def write_rows(self, rows) -> None:
        text = "".join(format_row(r, self.fmt, self.fields) for r in rows)
        if self.header:
            text, self.header = ",".join(self.fields) + "\n" + text, False
        sys.stdout.write(text)
        sys.stdout.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def write_batch(f, rows, fmt, fields) -> None:
    """One batch's rows on --out, durably (write_all)."""
    write_all(f, "".join(format_row(r, fmt, fields) for r in rows).encode("utf-8"))


FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def write_failed(out: Path, exc: OSError) -> StageError:
    """The one-line error for --out that cannot be created or written."""
    if exc.errno in FULL:
        return StageError(f"{out}: cannot write --out: {exc.strerror} (the disk or a file-size "
                          f"limit is full); free space and re-run the same command: the rows "
                          f"already written are kept and a torn last line is repaired.")
    return StageError(f"{out}: cannot write --out: {exc.strerror}; choose a writable --out "
                      f"(or fix the permissions of {out.parent}).")

