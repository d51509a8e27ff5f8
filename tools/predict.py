"""Batch prediction over files, folders, globs and @lists, that survives bad files and restarts.

Not a DVC stage: a tool that applies the exported model to any number of images. Inputs are
streamed in batches (memory does not grow with the number of images; only the set of paths
already in the output is kept). Each batch's rows are flushed and fsynced before the next
batch starts, so a run killed at any moment loses at most the batch in flight; re-running the
same command skips every path already in --out and repairs a torn last line first.

Test hook (stages/lib/hooks.py): PREDICT_DELAY_S sleeps after every written batch, so a test can
SIGKILL a slow run at an arbitrary moment.
"""
import glob
import json
import os
import sys
import time
from pathlib import Path

import click

from stages.lib import hooks
from stages.lib.io import StageError
from tools.options import model_options



def output_fields(model) -> list[str]:
    """The columns of the output: path, the task's prediction fields, error (classification:
    path, label, score, topk, error)."""
    return ["path", *model.task.prediction_fields, "error"]

EXIT_OK, EXIT_FATAL, EXIT_USAGE, EXIT_SOME_FAILED = 0, 1, 2, 3


# --- inputs ------------------------------------------------------------------------------

def walk(top: str):
    """Files under top, recursively, in sorted order; hidden files and folders are skipped."""
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                yield os.path.normpath(os.path.join(dirpath, name))


def expand(source: str, allow_glob: bool = True):
    """A file, a folder (recursive) or a glob pattern (sorted matches), as file paths.

    A path that does not exist is yielded as is: its row will carry the error.
    """
    if os.path.isdir(source):
        yield from walk(source)
    elif allow_glob and glob.has_magic(source) and not os.path.exists(source):
        for match in sorted(glob.glob(source, recursive=True)):
            yield from walk(match) if os.path.isdir(match) else [os.path.normpath(match)]
    else:
        yield os.path.normpath(source)


def read_list(list_file: str):
    """Paths from a @list file: one per line (files or folders, no globs); blank lines and
    lines starting with # are skipped; relative paths are relative to the working directory."""
    with open(list_file, encoding="utf-8") as f:
        for line in f:
            entry = line.rstrip("\r\n").strip()
            if entry and not entry.startswith("#"):
                yield from expand(entry, allow_glob=False)


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
            if not os.path.isfile(source[1:]):
                raise click.UsageError(f"list file {source[1:]} not found (SOURCE {source}).")
        elif not os.path.exists(source) and not (glob.has_magic(source) and next(
                glob.iglob(source, recursive=True), None)):
            raise click.UsageError(f"SOURCE {source} is neither a file, a folder nor a glob "
                                   f"that matches a file.")


# --- the output file ---------------------------------------------------------------------

def output_format(out: Path, fmt: str | None) -> str:
    return fmt or ("csv" if out.suffix.lower() == ".csv" else "jsonl")


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
            if reader.fieldnames and reader.fieldnames != fields:
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
    """Rewrite the output atomically without its error rows; return their paths, in order."""
    import tempfile

    failed = []
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            if fmt == "csv":
                f.write(",".join(fields) + "\n")
            for row in read_rows(path, fmt, fields):
                if row["error"]:
                    failed.append(row["path"])
                    continue
                f.write(format_row(row, fmt, fields))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return failed


def open_output(out: Path, fmt: str, fields: list[str]):
    """Append handle on --out; a new CSV file gets its header (durably) first."""
    out.parent.mkdir(parents=True, exist_ok=True)
    f = open(out, "a", encoding="utf-8", newline="")
    if fmt == "csv" and f.tell() == 0:
        f.write(",".join(fields) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return f


# --- the run -----------------------------------------------------------------------------

def predict_rows(model, batch, top_k: int) -> list[dict]:
    """batch: [(path, uint8 image or None, error)] -> output rows in the same order."""
    from tools.inference import predict_batch

    preds = iter(predict_batch(model, [img for _, img, _ in batch if img is not None], top_k))
    rows = []
    for path, img, error in batch:
        if img is None:
            rows.append({"path": path, **model.task.empty_prediction(), "error": error})
        else:
            rows.append({"path": path, **next(preds), "error": ""})
    return rows


def write_batch(f, rows, fmt, fields) -> None:
    f.write("".join(format_row(r, fmt, fields) for r in rows))
    f.flush()
    os.fsync(f.fileno())


@click.command()
@click.argument("sources", nargs=-1)
@model_options
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("predictions.jsonl"), show_default=True,
              help="Output file. Rows already in it are skipped (restart), new rows appended.")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), default=None,
              help="Output format. Default: csv when --out ends in .csv, else jsonl.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="Images per inference call (and per durable write).")
@click.option("--retry-failed", is_flag=True,
              help="Drop the error rows from --out and predict those paths again. Without "
                   "SOURCE, only the failed paths are re-run.")
def main(sources, model_path, backend, out, fmt, batch_size, threads, top_k, max_pixels,
         retry_failed):
    """Predict the class of every image in SOURCE... and write one row per image to --out.

    SOURCE is an image file, a folder (all files below it, recursively, sorted; hidden ones
    skipped), a glob pattern ('photos/**/*.jpg', quoted) or @list.txt (one path per line).

    Each row has path, the task's prediction fields and error; for classification label,
    score (softmax probability of label) and topk (a list of {label, score}). A file that
    cannot be read or decoded, or whose header declares more than --max-pixels pixels (it is
    not decoded), gets a row with its error, and the run goes on.

    The run is restartable: re-run the same command after a crash or Ctrl-C and it skips
    every path already in --out, so each input ends with exactly one row.

    Exit codes: 0 every input has a prediction; 3 some inputs failed (their rows carry the
    error); 1 fatal error (model missing or unusable, unreadable --out); 2 usage error.
    """
    from tqdm import tqdm

    from tools.inference import BadImage, load, read_image

    if not sources and not retry_failed:
        raise click.UsageError("give at least one SOURCE (or --retry-failed to re-run the "
                               "failed rows of --out).")
    check_sources(sources)
    fmt = output_format(out, fmt)
    model = load(backend, model_path, threads)
    fields = output_fields(model)

    done, failed_before, retry = set(), set(), []
    if out.exists():
        if repair_torn_tail(out):
            click.echo(f"predict: repaired a torn last line in {out}", err=True)
        if retry_failed:
            retry = drop_failed_rows(out, fmt, fields)
        for row in read_rows(out, fmt, fields):
            (failed_before if row["error"] else done).add(row["path"])
    elif not sources:
        raise click.UsageError(f"--retry-failed without SOURCE needs an existing --out ({out}).")

    def inputs():
        return iter_inputs(sources) if sources else iter(retry)

    total = sum(1 for _ in inputs()) if sys.stderr.isatty() else None  # for the ETA only
    delay = float(hooks.value("PREDICT_DELAY_S") or 0)

    counts = {"ok": 0, "failed": 0, "skipped": 0, "skipped_failed": 0}
    start = time.perf_counter()
    batch = []
    with open_output(out, fmt, fields) as f, tqdm(inputs(), total=total, unit="img", disable=None,
                                          desc="predict", dynamic_ncols=True) as bar:
        def flush():
            try:
                rows = predict_rows(model, batch, top_k)
            except Exception as exc:  # the images decoded fine: the model (or its file) is bad
                raise StageError(f"{model.path}: inference failed on the batch starting at "
                                 f"{batch[0][0]}: {type(exc).__name__}: {exc}. Rows written "
                                 f"so far are kept; re-run to continue.") from exc
            write_batch(f, rows, fmt, fields)
            for row in rows:
                counts["failed" if row["error"] else "ok"] += 1
            batch.clear()
            if delay:
                time.sleep(delay)

        out_abs = os.path.abspath(out)
        for path in bar:
            if os.path.abspath(path) == out_abs:  # `predict . --out p.jsonl`: not an input
                continue
            if path in done or path in failed_before:
                counts["skipped_failed" if path in failed_before else "skipped"] += 1
                continue
            done.add(path)  # a path listed twice gets one row
            try:
                batch.append((path, read_image(path, model.image_size, model.channels,
                                               max_pixels), ""))
            except BadImage as exc:
                batch.append((path, None, f"{exc.kind}: {exc}"))
            if len(batch) >= batch_size:
                flush()
        if batch:
            flush()
    seconds = time.perf_counter() - start
    new = counts["ok"] + counts["failed"]
    failed = counts["failed"] + counts["skipped_failed"]
    click.echo(f"predict: {new} predicted ({counts['failed']} failed), "
               f"{counts['skipped'] + counts['skipped_failed']} already in {out} "
               f"({counts['skipped_failed']} of them failed); {new / max(seconds, 1e-9):.1f} "
               f"images/s; {failed} input(s) with an error")
    if failed:
        sys.exit(EXIT_SOME_FAILED)


if __name__ == "__main__":
    main()
