"""Run the whole pipeline on a small seeded subset of your data and one short epoch, in a temp
copy.

Proves data loading, forward/backward, loss, model save/load, evaluation and ONNX export all
work with your data and your params before anyone spends hours on a full run. The subset is
drawn from the configured `data.source` (write_subset with stages/lib/data/subset.py: --per-class
files of each class, or files for tasks without classes, chosen by a hash of --seed and the
path); every param is yours except data.source, train.epochs and, so that the subset can
pass, validate.min_per_class (with --sample too).
`--sample` (or a data.source that is the built-in sample) uses the built-in data instead, with
validate.classes emptied (the sample's classes are not yours). Your workspace is not touched;
the stages' progress is printed as they start.
"""
import shutil
import sys
import tempfile
import time
from pathlib import Path

import click

SAMPLE_SOURCE = "data/sample"  # the `sample` stage's out
SUBSET_DIR = "data/smoke"  # in the temp copy


def write_subset(task, source: Path, dest: Path, per_group: int, seed: int,
                 settings: dict) -> int:
    """Copy the seeded subset of source (stages/lib/data/subset.py) into dest, at the same relative
    paths, with the task's annotation files cut to it; the number of images."""
    from stages.ingest import walk
    from stages.lib.data.subset import choose

    source, dest = Path(source), Path(dest)
    listing = walk(source)
    annotations = task.read_annotations(source, listing, settings)
    chosen = choose(task, annotations, listing, per_group, seed)
    for rel in chosen:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / rel, dest / rel)
    dest.mkdir(parents=True, exist_ok=True)
    task.subset_annotations(source, dest, annotations, set(chosen))
    return len(chosen)


@click.command()
@click.option("--per-class", default=6, show_default=True,
              help="Images per class (per file group for tasks without classes).")
@click.option("--epochs", default=1, show_default=True, help="Training epochs.")
@click.option("--seed", default=0, show_default=True, help="Which images the subset takes.")
@click.option("--sample", "use_sample", is_flag=True,
              help="Use the built-in sample instead of data.source.")
@click.option("--keep", is_flag=True, help="Keep the temp copy and print its path.")
def main(per_class, epochs, seed, use_sample, keep):
    """Run `dvc repro` on a small subset of data.source in a temp copy and check its outputs."""
    from stages.lib.io import StageError, read_json
    from stages.lib.params import load_all
    from stages.tasks import current
    from tools.project import copy_project, dvc

    start = time.monotonic()
    task = current()  # your params must fit your task before anything is copied
    params = load_all()
    source = params["data"].source
    use_sample = use_sample or Path(source) == Path(SAMPLE_SOURCE)
    if not use_sample and not Path(source).is_dir():
        raise StageError(f"smoke: data.source {source} is not a folder here; fetch it (`dvc "
                         f"pull`) or run `python -m tools.smoke --sample` on the built-in data.")
    # the subset must pass validate's per-class minimum
    overrides = {"train.epochs": epochs,
                 "validate.min_per_class": min(params["validate"].min_per_class, per_class)}
    if use_sample:
        # the built-in sample has its own classes: your validate.classes would reject them
        overrides.update({"data.source": SAMPLE_SOURCE, "validate.classes": []})
        if "sample.per_class" in task.task_keys:  # another task's sample has no classes
            overrides["sample.per_class"] = per_class
    else:
        overrides["data.source"] = SUBSET_DIR
    tmp = Path(tempfile.mkdtemp(prefix="pipeline-smoke-"))
    try:
        copy_project(Path.cwd(), tmp, params=overrides, git_init=False)
        if use_sample:
            click.echo(f"smoke: the built-in sample, {per_class} per class, {epochs} epoch(s)")
        else:
            n = write_subset(task, Path(source), tmp / SUBSET_DIR, per_class, seed,
                             task.read_settings(params))
            click.echo(f"smoke: {n} files of {source} ({per_class} per class, seed {seed}), "
                       f"{epochs} epoch(s), your params otherwise")
        from tools.project import git

        git(tmp, "init", "-q")
        git(tmp, "add", "-A")
        git(tmp, "commit", "-qm", "smoke copy")
        proc = dvc(tmp, "repro", check=False, progress=lambda line: click.echo(
            f"smoke: stage {line.split(chr(39))[1]} ({time.monotonic() - start:.0f}s)")
            if line.startswith("Running stage '") else None)
        if proc.returncode != 0:
            raise StageError(f"smoke: `dvc repro` failed in {tmp}:\n{proc.stdout[-4000:]}"
                             f"{proc.stderr[-4000:]}")
        for out in ("models/model.pt", "models/model.onnx", "data/manifest.csv"):
            if not (tmp / out).is_file():
                raise StageError(f"smoke: the pipeline finished but {out} is missing.")
        ev = read_json(tmp / "metrics/eval.json")
        ex = read_json(tmp / "logs/export.json")["metrics"]  # the run record: raw figures
        score = (f", {task.headline_metric} {ev[task.headline_metric]:.3f} (untrained-ish, "
                 f"not a quality check)" if task.headline_metric in ev else "")
        click.echo(f"smoke: OK in {time.monotonic() - start:.1f}s: {ev.get('samples', '?')} "
                   f"test images{score}, ONNX max |diff| {ex['max_abs_diff']:.1e}")
    finally:
        if keep:
            click.echo(f"smoke: kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
