"""Run the whole pipeline on a few dozen samples and one short epoch, in a temp copy.

Proves data loading, forward/backward, loss, model save/load, evaluation and ONNX export all
work before anyone spends hours on a full run. Your workspace is not touched.
"""
import shutil
import tempfile
import time
from pathlib import Path

import click


@click.command()
@click.option("--per-class", default=6, show_default=True,
              help="Images per class taken from the built-in sample.")
@click.option("--epochs", default=1, show_default=True, help="Training epochs.")
@click.option("--keep", is_flag=True, help="Keep the temp copy and print its path.")
def main(per_class, epochs, keep):
    """Run `dvc repro` on a tiny config in a temp copy of this project and check its outputs."""
    from stages.lib.io import StageError, read_json
    from tools.project import copy_project, dvc

    start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="pipeline-smoke-"))
    try:
        copy_project(Path.cwd(), tmp, params={"data.source": "data/sample",
                                              "sample.per_class": per_class,
                                              "train.epochs": epochs})
        proc = dvc(tmp, "repro", check=False)
        if proc.returncode != 0:
            raise StageError(f"smoke: `dvc repro` failed in {tmp}:\n{proc.stdout[-4000:]}"
                             f"{proc.stderr[-4000:]}")
        for out in ("models/model.pt", "models/model.onnx", "data/manifest.csv"):
            if not (tmp / out).is_file():
                raise StageError(f"smoke: the pipeline finished but {out} is missing.")
        ev, ex = read_json(tmp / "metrics/eval.json"), read_json(tmp / "metrics/export.json")
        click.echo(f"smoke: OK in {time.monotonic() - start:.1f}s: {ev['samples']} test images, "
                   f"accuracy {ev['accuracy']:.3f} (untrained-ish, not a quality check), "
                   f"ONNX max |diff| {ex['max_abs_diff']:.1e}")
    finally:
        if keep:
            click.echo(f"smoke: kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
