"""Batch prediction over files, folders, globs and @lists, that survives bad files and restarts.

Not a DVC stage: a tool that applies the exported model, of any task, to any number of images.
Inputs (inputs.py) are streamed in batches (memory does not grow with the number of images;
only the set of paths already in the output is kept). Each batch's rows (rows.py) are flushed
and fsynced before the next batch starts, so a run killed at any moment loses at most the batch
in flight; re-running the same command skips every path already in --out and repairs a torn
last line first (rowfile.py). --ray computes the same rows on a Ray cluster (ray.py).

Test hook (stages/lib/hooks.py): PREDICT_DELAY_S sleeps after every written batch, so a test can
SIGKILL a slow run at an arbitrary moment.
"""
import atexit
import os
import sys
import time
from pathlib import Path

import click

from stages.lib import hooks
from stages.lib.io import StageError, replace_file
from tools.options import apply_decode_options, model_options
from tools.predict.inputs import check_sources, input_folders, iter_inputs
from tools.predict.rowfile import (STDOUT, StdoutRows, check_model, check_ours,
                                   drop_failed_rows, open_output, output_fields, output_format,
                                   pending, read_rows, repair_torn_tail, write_batch,
                                   write_failed)
from tools.predict.rows import decode_input, infer

EXIT_SOME_FAILED = 3  # some inputs failed: their rows carry the error


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
def main(sources, model_path, registry, backend, out, fmt, batch_size, threads, top_k,
         max_pixels, max_seconds, overwrite, out_dir, retry_failed, score_threshold, beam,
         min_confidence, ray_address, ray_shard):
    """Predict every image in SOURCE... with the exported model (whatever its task) and write
    one row per image to --out.

    SOURCE is an image file, a folder (all files below it, recursively, sorted; hidden ones
    skipped), a glob pattern ('photos/**/*.jpg', quoted) or @list.txt (one path per line).

    Each row has path, the task's prediction fields, error and model; for classification
    label, score (softmax probability of label) and topk (a list of {label, score}); model is
    the model version (the first 12 hex digits of the sha256 of the trained weights,
    models/model.pt: the version serve answers and the report shows). A file that
    cannot be read or decoded, or whose header declares more than --max-pixels pixels (a
    sound: more than --max-seconds seconds; it is not decoded), gets a row with its error, and
    the run goes on.

    The run is restartable: re-run the same command after a crash or Ctrl-C and it skips
    every path already in --out, so each input ends with exactly one row. An --out written
    by another model is refused (naming both versions) unless --overwrite replaces it.

    --model NAME@v1.2.0, NAME#prod or NAME (the latest version) predicts with a registered
    model of --registry (default: this repository), fetched once into the model cache and
    hash-checked before every load; each row then also names its artifact, artifact_version,
    stage, commit and data_version (docs/registry.md).
    `--out -` (the default for a single image file) writes the rows to stdout, nothing else.

    Exit codes: 0 every input has a prediction; 3 some inputs failed (their rows carry the
    error); 1 fatal error (model missing or unusable, unreadable --out); 2 usage error.
    """
    from tools.registry.models import load

    if not sources and not retry_failed:
        raise click.UsageError("give at least one SOURCE (or --retry-failed to re-run the "
                               "failed rows of --out).")
    check_sources(sources)
    out_dir = outdir(out_dir, sources)
    out = default_out(sources) if out is None else out
    if out == STDOUT and retry_failed:
        raise click.UsageError("--retry-failed needs an --out file, not stdout.")
    fmt = output_format(out, fmt)
    # --ray first: an unreachable cluster changes nothing
    ray = connect(ray_address) if ray_address is not None else None
    model = load(backend, model_path, registry, threads)  # a file, or NAME@v1.2.0 / NAME#prod
    if model.registry:  # --ray's workers load the checked copy in the cache
        model_path = model.registry["cached"]
    apply_decode_options(model, score_threshold, beam, min_confidence)
    model.max_seconds = max_seconds  # a sound model's input limit
    fields = output_fields(model)
    done, failed_before, retry = resume(out, fmt, fields, model, overwrite, retry_failed,
                                        sources)

    def inputs():
        return iter_inputs(sources) if sources else iter(retry)

    total = (sum(1 for _ in inputs()) if sys.stderr.isatty() and out != STDOUT
             and ray is None else None)  # for the ETA only
    counts = {"ok": 0, "failed": 0, "skipped": 0, "skipped_failed": 0}
    start = time.perf_counter()
    with Emitter(out, fmt, fields, model, out_dir, counts) as emit:
        if ray is not None:
            from tools.predict.ray import predict_on_ray

            predict_on_ray(ray, pending(inputs(), out, done, failed_before, counts),
                           model, model_path, emit, batch_size=batch_size, shard_batches=ray_shard,
                           top_k=top_k, max_pixels=max_pixels, threads=threads,
                           progress=out != STDOUT)
        else:
            predict_local(inputs(), total, out, done, failed_before, counts, model, emit,
                          batch_size=batch_size, top_k=top_k, max_pixels=max_pixels)
    failed = report(out, counts, time.perf_counter() - start)
    if failed:
        sys.exit(EXIT_SOME_FAILED)


def outdir(out_dir, sources):
    """--out-dir as a stages.lib.data.outdir.OutDir that refuses the input folders, or None."""
    if out_dir is None:
        return None
    from stages.lib.data.outdir import OutDir

    try:
        return OutDir(out_dir, input_folders(sources))
    except ValueError as exc:
        raise StageError(str(exc)) from None


def default_out(sources) -> Path:
    """--out's default: stdout for one image file, else predictions.jsonl."""
    single = (len(sources) == 1 and not sources[0].startswith("@")
              and os.path.isfile(sources[0]))
    return STDOUT if single else Path("predictions.jsonl")


def connect(ray_address: str):
    """The ray module, connected to the cluster at --ray (disconnected at exit)."""
    from stages.lib.data import raycluster
    from tools.predict.ray import connect

    ray = connect(ray_address)
    atexit.register(raycluster.disconnect)
    return ray


def resume(out: Path, fmt: str, fields: list[str], model, overwrite: bool,
           retry_failed: bool, sources) -> tuple[set, set, list]:
    """(paths with a row in --out, paths with an error row there, the failed paths to re-run
    with --retry-failed): an existing --out checked as ours, its torn tail repaired, emptied
    with --overwrite, else refused when another model wrote it."""
    done, failed_before, retry = set(), set(), []
    to_stdout = out == STDOUT
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
            check_model(out, fmt, fields, model.version)
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
    return done, failed_before, retry


class Emitter:
    """emit(rows): one batch's rows (and their --out-dir files) written durably, then counted;
    a context manager over --out (or stdout)."""

    def __init__(self, out: Path, fmt: str, fields: list[str], model, out_dir, counts: dict):
        self.out, self.fmt, self.fields, self.model = out, fmt, fields, model
        self.out_dir, self.counts = out_dir, counts
        self.delay = float(hooks.value("PREDICT_DELAY_S") or 0)
        from tools.registry.models import fields as registry_fields

        self.extra = registry_fields(model.registry) if model.registry else {}
        try:
            self.f = StdoutRows(fmt, fields) if out == STDOUT else open_output(out, fmt, fields)
        except OSError as exc:
            raise write_failed(out, exc) from None

    def __call__(self, rows) -> None:
        if self.extra:  # a registered model: which version, of what, wrote each row
            rows = [{**r, **self.extra} for r in rows]
        if self.out_dir is not None:
            try:
                rows = [self.model.task.write_prediction(r, self.out_dir) if not r["error"]
                        else r for r in rows]
            except OSError as exc:
                raise write_failed(self.out_dir.root, exc) from None
        try:
            if self.out == STDOUT:
                self.f.write_rows(rows)
            else:
                write_batch(self.f, rows, self.fmt, self.fields)
        except OSError as exc:
            raise write_failed(self.out, exc) from None
        for row in rows:
            self.counts["failed" if row["error"] else "ok"] += 1
        if self.delay:
            time.sleep(self.delay)

    def __enter__(self):
        self.f.__enter__()
        return self

    def __exit__(self, *exc):
        return self.f.__exit__(*exc)


def predict_local(inputs, total, out, done: set, failed_before: set, counts: dict, model,
                  emit, *, batch_size: int, top_k: int, max_pixels: int) -> None:
    """Decode and predict the pending inputs here, batch by batch, emitting each batch's rows;
    a progress bar (of total inputs, when counted), none for stdout."""
    from tqdm import tqdm

    with tqdm(inputs, total=total, unit="img", disable=True if out == STDOUT else None,
              desc="predict", dynamic_ncols=True) as bar:
        batch = []
        for path in pending(bar, out, done, failed_before, counts):
            batch.append(decode_input(path, model, max_pixels))
            if len(batch) >= batch_size:
                emit(infer(model, batch, top_k))
                batch.clear()
        if batch:
            emit(infer(model, batch, top_k))


def report(out: Path, counts: dict, seconds: float) -> int:
    """Print the run's summary (not on stdout: there the rows alone); the inputs with an
    error, this run's and earlier ones."""
    new = counts["ok"] + counts["failed"]
    failed = counts["failed"] + counts["skipped_failed"]
    if out != STDOUT:  # on stdout, the rows alone: one image, one line
        click.echo(f"predict: {counts['ok']} predicted, {counts['failed']} failed; "
                   f"{counts['skipped'] + counts['skipped_failed']} already in {out} "
                   f"({counts['skipped_failed']} of them failed); "
                   f"{new / max(seconds, 1e-9):.1f} images/s; {failed} input(s) with an error")
    return failed


if __name__ == "__main__":
    main()
