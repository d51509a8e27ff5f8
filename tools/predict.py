"""Batch prediction over files, folders, globs and @lists, that survives bad files and restarts.

Not a DVC stage: a tool that applies the exported model to any number of images. Inputs are
streamed in batches (memory does not grow with the number of images; only the set of paths
already in the output is kept). Each batch's rows are flushed and fsynced before the next
batch starts, so a run killed at any moment loses at most the batch in flight; re-running the
same command skips every path already in --out and repairs a torn last line first.

Test hook (stages/lib/hooks.py): PREDICT_DELAY_S sleeps after every written batch, so a test can
SIGKILL a slow run at an arbitrary moment.
"""
import atexit
import errno
import glob
import json
import os
import stat
import sys
import time
from pathlib import Path

import click

from stages.lib import hooks
from stages.lib.io import StageError, mode_kind, replace_file
from tools.options import apply_decode_options, model_options
from tools.predict_rows import Problem, decode_input, infer, predict_rows  # noqa: F401



def output_fields(model) -> list[str]:
    """The columns of the output: path, the task's prediction fields, error, model
    (classification: path, label, score, topk, error, model). `model` is the model version:
    the sha256 of the trained weights (models/model.pt, the ONNX metadata's model_sha256)."""
    return ["path", *model.task.prediction_fields, "error", "model"]


def legacy_fields(fields: list[str]) -> list[str]:
    """The columns predict wrote before rows carried the model version."""
    return [f for f in fields if f != "model"]

STDOUT = Path("-")

EXIT_OK, EXIT_FATAL, EXIT_USAGE, EXIT_SOME_FAILED = 0, 1, 2, 3


# --- inputs ------------------------------------------------------------------------------

def _special(mode: int) -> str:
    return f"not_regular: {mode_kind(mode)}, not read"


def _scan(path: str):
    """(sorted non-hidden entries, None) or (None, error message) for one folder."""
    try:
        with os.scandir(path) as it:
            return sorted((e for e in it if not e.name.startswith(".")),
                          key=lambda e: e.name), None
    except OSError as exc:
        return None, f"unreadable: cannot list this folder: {exc.strerror}"


def _dir_id(path: str):
    """(st_dev, st_ino) of a folder (through symlinks), or None when it is not one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def walk(top: str):
    """Files under top, recursively, in sorted order (a folder's files, then its subfolders);
    hidden files and folders are skipped. Symlinked folders are followed after the real tree,
    each real folder once (by st_dev and st_ino): a symlink to a folder already listed (a loop
    back to an ancestor, or a second way into one) gets one Problem row, as do a folder that
    cannot be listed, a symlink cycle and a FIFO, socket or device (never opened)."""
    seen, links = {}, []  # (st_dev, st_ino) -> the path it was listed under; deferred symlinks
    top = os.path.normpath(top)
    seen[_dir_id(top)] = top
    yield from _walk_real(top, seen, links)
    while links:
        path = links.pop(0)
        ident = _dir_id(path)
        if ident in seen:
            first = seen[ident]
            how = "back to its own parent folder" if (path + os.sep).startswith(
                first + os.sep) else "to a folder"
            yield Problem(path, f"symlink_loop: a symlinked folder pointing {how} {first}, "
                                f"whose files are listed once, there")
            continue
        seen[ident] = path
        yield from _walk_real(path, seen, links)


def _walk_real(top: str, seen: dict, links: list):
    entries, error = _scan(top)
    if error:
        yield Problem(top, error)
        return
    folders = []
    for e in entries:
        path = e.name if top == os.curdir else os.path.join(top, e.name)  # normalised
        try:
            if e.is_dir():  # follows a symlink
                if e.is_symlink():
                    links.append(path)
                else:
                    folders.append(path)
                continue
            mode = e.stat().st_mode
        except OSError as exc:  # a symlink cycle (ELOOP), a vanished entry
            if exc.errno == errno.ELOOP:
                yield Problem(path, "symlink_loop: a symlink cycle, it points back to itself")
            else:
                yield path  # vanished: its row says why it cannot be read
            continue
        yield path if stat.S_ISREG(mode) else Problem(path, _special(mode))
    for path in folders:
        seen[_dir_id(path)] = path
        yield from _walk_real(path, seen, links)


def _glob(pattern: str):
    """glob.glob(pattern, recursive=True), except that `**` descends each real folder once
    (by st_dev and st_ino; symlinked folders after the real tree): loops are not followed,
    and a folder the pattern must list but cannot (no permission, an I/O error) is a Problem
    (`unreadable`), as walk() gives it, instead of silently matching nothing."""
    import fnmatch

    drive, rest = os.path.splitdrive(pattern)
    parts = [p for p in rest.split(os.sep) if p]
    start = drive + (os.sep if rest.startswith(os.sep) else "")
    found, seen, links = set(), set(), []

    def listing(folder):
        entries, error = _scan(folder or ".")
        if error and os.path.isdir(folder or "."):  # a path that is no folder: no match
            found.add(Problem(os.path.normpath(folder or "."), error))
        return entries or []

    def match(folder, parts):
        if not parts:
            if folder and os.path.lexists(folder):
                found.add(os.path.normpath(folder))
            return
        head, tail = parts[0], parts[1:]
        if head == "**":
            seen.add(_dir_id(folder or "."))
            match(folder, tail)
            for e in listing(folder):
                path = os.path.join(folder, e.name)
                try:
                    if not e.is_dir():
                        continue
                    if e.is_symlink():
                        links.append((path, parts))
                        continue
                except OSError:
                    continue
                seen.add(_dir_id(path))
                match(path, parts)
        elif glob.has_magic(head):
            for e in listing(folder):
                if fnmatch.fnmatchcase(e.name, head):
                    match(os.path.join(folder, e.name), tail)
        else:
            match(os.path.join(folder, head) if folder else head, tail)

    match(start, parts)
    while links:
        path, parts = links.pop(0)
        ident = _dir_id(path)
        if ident not in seen:
            seen.add(ident)
            match(path, parts)
    return sorted(found)


def expand(source: str, allow_glob: bool = True):
    """A file, a folder (recursive) or a glob pattern (sorted matches), as file paths.

    A path that does not exist is yielded as is: its row will carry the error.
    """
    if os.path.isdir(source):
        yield from walk(source)
    elif allow_glob and glob.has_magic(source) and not os.path.exists(source):
        for match in _glob(source):
            if isinstance(match, Problem):
                yield match
            else:
                yield from walk(match) if os.path.isdir(match) else [os.path.normpath(match)]
    else:
        yield os.path.normpath(source)


def list_entries(list_file: str):
    """The entries of a @list file: one per line (files or folders, no globs); blank lines and
    lines starting with # are skipped; relative paths are relative to the working directory."""
    with open(list_file, encoding="utf-8") as f:
        for line in f:
            entry = line.rstrip("\r\n").strip()
            if entry and not entry.startswith("#"):
                yield entry


def read_list(list_file: str):
    """Paths from a @list file (list_entries, each expanded)."""
    for entry in list_entries(list_file):
        yield from expand(entry, allow_glob=False)


def linked_folders(top: str) -> list[str]:
    """The folders under top that walk() reaches through a symlink (each real folder once):
    their files are inputs too, though they lie elsewhere. Folders are listed, files never
    stat'ed."""
    seen, stack, out = {_dir_id(top)}, [os.path.normpath(top)], []
    while stack:
        folder = stack.pop()
        for e in _scan(folder)[0] or []:
            path = os.path.join(folder, e.name)
            try:
                if not e.is_dir() or _dir_id(path) in seen:
                    continue
                seen.add(_dir_id(path))
                if e.is_symlink():
                    out.append(path)
            except OSError:
                continue
            stack.append(path)
    return sorted(out)


def input_folders(sources):
    """The folders whose files are inputs (--out-dir writes nothing inside them): folder
    SOURCEs, folders in @lists and folders a glob matches, and the folders each reaches
    through symlinks."""
    for source in sources:
        if source.startswith("@"):
            tops = [e for e in list_entries(source[1:]) if os.path.isdir(e)]
        elif os.path.isdir(source):
            tops = [source]
        elif glob.has_magic(source) and not os.path.exists(source):
            tops = [m for m in _glob(source) if os.path.isdir(m)]
        else:
            tops = []
        for top in tops:
            yield top
            yield from linked_folders(top)


def iter_inputs(sources):
    for source in sources:
        if source.startswith("@"):
            yield from read_list(source[1:])
        else:
            yield from expand(source)


def check_sources(sources) -> None:
    """Fail before loading anything when a SOURCE itself names nothing (a typo)."""
    for source in sources:
        if source.startswith("@"):
            try:
                mode = os.stat(source[1:]).st_mode
            except OSError:
                raise click.UsageError(f"list file {source[1:]} not found (SOURCE "
                                       f"{source}).") from None
            if not stat.S_ISREG(mode):  # never opened: a FIFO would hang predict
                raise click.UsageError(f"list file {source[1:]} is not a regular file "
                                       f"({mode_kind(mode)}, not read; SOURCE {source}): give a "
                                       f"text file with one path per line.")
        elif not os.path.exists(source) and not (glob.has_magic(source) and _glob(source)):
            raise click.UsageError(f"SOURCE {source} is neither a file, a folder nor a glob "
                                   f"that matches a file.")


# --- the output file ---------------------------------------------------------------------

def output_format(out: Path, fmt: str | None) -> str:
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


# --- the run -----------------------------------------------------------------------------

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
        if theirs != version:
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


@click.command()
@click.argument("sources", nargs=-1)
@model_options
@click.option("--out", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
              default=None,
              help="Output file, or - for stdout. Default: - when SOURCE is one image file, "
                   "else predictions.jsonl. Rows of this model already in the file are "
                   "skipped (restart), new rows appended.")
@click.option("--overwrite", is_flag=True,
              help="Replace --out when it holds another model's predictions (otherwise that "
                   "is refused: one file never mixes models).")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), default=None,
              help="Output format. Default: csv when --out ends in .csv, else jsonl.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="Images per inference call (and per durable write).")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write each input's prediction file here where the task has one "
                   "(segmentation: a PNG mask of class indices at the input's own size, under "
                   "the input's relative path; an absolute one without its root); its row then "
                   "names the file. Never inside an input folder, never over an input or a "
                   "file predict did not write (that row gets a mask_refused error).")
@click.option("--retry-failed", is_flag=True,
              help="Drop the error rows from --out and predict those paths again. Without "
                   "SOURCE, only the failed paths are re-run.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None,
              metavar="[ADDRESS]",
              help="Run on a Ray cluster: the cluster at ADDRESS (HOST:6379, as `ray start "
                   "--head` prints it), or a bare --ray for a local one on this machine. The "
                   "same rows, in the same order, as without it; the inputs must be at a "
                   "path every node can read (docs/ray.md).")
@click.option("--ray-shard", type=click.IntRange(min=1), default=4, show_default=True,
              metavar="BATCHES",
              help="With --ray: batches (of --batch-size images) per shard, the unit a worker "
                   "decodes and an actor predicts.")
def main(sources, model_path, backend, out, fmt, batch_size, threads, top_k, max_pixels,
         overwrite, out_dir, retry_failed, score_threshold, beam, ray_address, ray_shard):
    """Predict the class of every image in SOURCE... and write one row per image to --out.

    SOURCE is an image file, a folder (all files below it, recursively, sorted; hidden ones
    skipped), a glob pattern ('photos/**/*.jpg', quoted) or @list.txt (one path per line).

    Each row has path, the task's prediction fields, error and model; for classification
    label, score (softmax probability of label) and topk (a list of {label, score}); model is
    the model version (sha256 of the trained weights, models/model.pt). A file that
    cannot be read or decoded, or whose header declares more than --max-pixels pixels (it is
    not decoded), gets a row with its error, and the run goes on.

    The run is restartable: re-run the same command after a crash or Ctrl-C and it skips
    every path already in --out, so each input ends with exactly one row. An --out written
    by another model is refused (naming both versions) unless --overwrite replaces it.
    `--out -` (the default for a single image file) writes the rows to stdout, nothing else.

    Exit codes: 0 every input has a prediction; 3 some inputs failed (their rows carry the
    error); 1 fatal error (model missing or unusable, unreadable --out); 2 usage error.
    """
    from tqdm import tqdm

    from tools.inference import load

    if not sources and not retry_failed:
        raise click.UsageError("give at least one SOURCE (or --retry-failed to re-run the "
                               "failed rows of --out).")
    check_sources(sources)
    if out_dir is not None:
        from stages.lib.outdir import OutDir

        try:
            out_dir = OutDir(out_dir, input_folders(sources))
        except ValueError as exc:
            raise StageError(str(exc)) from None
    if out is None:
        single = (len(sources) == 1 and not sources[0].startswith("@")
                  and os.path.isfile(sources[0]))
        out = STDOUT if single else Path("predictions.jsonl")
    to_stdout = out == STDOUT
    if to_stdout and retry_failed:
        raise click.UsageError("--retry-failed needs an --out file, not stdout.")
    fmt = output_format(out, fmt)
    if ray_address is not None:  # first: an unreachable cluster changes nothing
        from stages.lib import raycluster
        from tools.predict_ray import connect

        ray = connect(ray_address)
        atexit.register(raycluster.disconnect)
    model = load(backend, model_path, threads)
    apply_decode_options(model, score_threshold, beam)
    fields = output_fields(model)

    done, failed_before, retry = set(), set(), []
    if not to_stdout and (out.exists() or out.is_symlink()):
        if not out.is_file():
            raise StageError(f"{out}: --out exists and is not a regular file; choose another "
                             f"--out.")
        if check_ours(out, fmt, fields) and repair_torn_tail(out):
            click.echo(f"predict: repaired a torn last line in {out}", err=True)
        if overwrite:  # ours (check_ours): another model's rows, replaced as asked by an
            with replace_file(out):  # empty file (through a symlink: its target, its mode)
                pass
        else:
            check_model(out, fmt, fields, model.weights_sha256)
    if not to_stdout and out.exists():
        if retry_failed:
            try:
                retry = drop_failed_rows(out, fmt, fields)
            except OSError as exc:
                raise write_failed(out, exc) from None
        for row in read_rows(out, fmt, fields):
            (failed_before if row["error"] else done).add(row["path"])
    elif not sources:
        raise click.UsageError(f"--retry-failed without SOURCE needs an existing --out ({out}).")

    def inputs():
        return iter_inputs(sources) if sources else iter(retry)

    total = (sum(1 for _ in inputs()) if sys.stderr.isatty() and not to_stdout
             and ray_address is None else None)  # for the ETA only
    delay = float(hooks.value("PREDICT_DELAY_S") or 0)

    counts = {"ok": 0, "failed": 0, "skipped": 0, "skipped_failed": 0}
    start = time.perf_counter()
    try:
        f = StdoutRows(fmt, fields) if to_stdout else open_output(out, fmt, fields)
    except OSError as exc:
        raise write_failed(out, exc) from None

    def emit(rows):
        """Write one batch's rows (and their --out-dir files), durably, then count them."""
        if out_dir is not None:
            try:
                rows = [model.task.write_prediction(r, out_dir) if not r["error"] else r
                        for r in rows]
            except OSError as exc:
                raise write_failed(out_dir.root, exc) from None
        try:
            f.write_rows(rows) if to_stdout else write_batch(f, rows, fmt, fields)
        except OSError as exc:
            raise write_failed(out, exc) from None
        for row in rows:
            counts["failed" if row["error"] else "ok"] += 1
        if delay:
            time.sleep(delay)

    with f:
        if ray_address is not None:
            from tools.predict_ray import predict_on_ray

            predict_on_ray(ray, pending(inputs(), out, done, failed_before, counts),
                           model, model_path, emit, batch_size=batch_size, shard_batches=ray_shard,
                           top_k=top_k, max_pixels=max_pixels, threads=threads,
                           progress=not to_stdout)
        else:
            with tqdm(inputs(), total=total, unit="img", disable=True if to_stdout else None,
                      desc="predict", dynamic_ncols=True) as bar:
                batch = []
                for path in pending(bar, out, done, failed_before, counts):
                    batch.append(decode_input(path, model, max_pixels))
                    if len(batch) >= batch_size:
                        emit(infer(model, batch, top_k))
                        batch.clear()
                if batch:
                    emit(infer(model, batch, top_k))
    seconds = time.perf_counter() - start
    new = counts["ok"] + counts["failed"]
    failed = counts["failed"] + counts["skipped_failed"]
    if not to_stdout:  # on stdout, the rows alone: one image, one line
        click.echo(f"predict: {counts['ok']} predicted, {counts['failed']} failed; "
                   f"{counts['skipped'] + counts['skipped_failed']} already in {out} "
                   f"({counts['skipped_failed']} of them failed); "
                   f"{new / max(seconds, 1e-9):.1f} images/s; {failed} input(s) with an error")
    if failed:
        sys.exit(EXIT_SOME_FAILED)


if __name__ == "__main__":
    main()
