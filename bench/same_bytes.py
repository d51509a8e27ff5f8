"""The same outs across commits: every task's sample run, md5 by md5.

A refactor that claims to change no behaviour proves it here. Run it on the commit before the
change and on the commit after it, then compare the two files:

    python -m bench.same_bytes --out before.json            # on the old commit
    python -m bench.same_bytes --out after.json             # on the new commit
    python -m bench.same_bytes --compare before.json after.json

Each run copies this checkout into a scratch folder, sets the task and its sample params, runs
`dvc repro` and reads every out's md5 from the `dvc.lock` it wrote. Code hashes are not outs:
only the bytes of the data, models, metrics and plots are compared. Outs that record the code
that made them (the ONNX model's metadata, the report that shows it) are listed apart.
"""
import json
import sys
import tempfile
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]

# Each task's built-in sample with its sample recipe; detection, segmentation, OCR, audio and
# speech are cut to a few epochs (every stage still runs; only train's loop is shorter).
RUNS = {
    "classification": {"task": "classification"},
    "detection": {"task": "detection", "train.epochs": 3},
    "segmentation": {"task": "segmentation", "train.epochs": 3},
    "ocr": {"task": "ocr", "train.epochs": 3},
    # audio and speech: a smaller sample (the first clips of the full one) for 2 epochs
    "audio": {"task": "audio", "sample.per_class": 24, "train.epochs": 2},
    "speech": {"task": "speech", "sample.clips": 500, "train.epochs": 2},
}

# Outs whose bytes include the code's own hash (the ONNX metadata, the report that shows it, the
# checkpoints' run fingerprint): they move with any code change.
CODE_STAMPED = ("models/model.onnx", "reports/run.html", "models/checkpoints")


def lock_outs(lock: dict) -> dict[str, str]:
    outs = {}
    for stage in lock["stages"].values():
        for out in stage.get("outs", []):
            outs[out["path"]] = out["md5"]
    return dict(sorted(outs.items()))


def run_task(name: str, overrides: dict) -> dict[str, str]:
    import yaml

    from tools.project import copy_project, dvc

    task = overrides["task"]
    module = __import__(f"stages.tasks.{task}", fromlist=["TASK"])
    params = {**getattr(module.TASK, "sample_params", {}), **overrides}
    with tempfile.TemporaryDirectory(prefix=f"same-{name}-") as tmp:
        dest = copy_project(ROOT, Path(tmp) / "project", params=params)
        tic = time.perf_counter()
        dvc(dest, "repro")
        click.echo(f"{name}: dvc repro {time.perf_counter() - tic:.0f} s", err=True)
        return lock_outs(yaml.safe_load((dest / "dvc.lock").read_text()))


def compare(before: dict, after: dict) -> int:
    rows, differ = [], 0
    for task in sorted(set(before) | set(after)):
        b, a = before.get(task, {}), after.get(task, {})
        for path in sorted(set(b) | set(a)):
            stamped = path.startswith(CODE_STAMPED)
            same = b.get(path) == a.get(path)
            if not same and not stamped:
                differ += 1
            verdict = "same" if same else ("code hash" if stamped else "DIFFERS")
            rows.append(f"| {task} | {path} | {str(b.get(path))[:8]} | {str(a.get(path))[:8]} "
                        f"| {verdict} |")
    click.echo("| task | out | before | after | |\n|---|---|---|---|---|")
    click.echo("\n".join(rows))
    click.echo(f"\n{differ} out(s) differ outside the code-stamped ones")
    return differ


@click.command()
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Run every task's sample and write {task: {out: md5}} here.")
@click.option("--task", "tasks", multiple=True, type=click.Choice(sorted(RUNS)),
              help="Run only these tasks (repeatable; default all six).")
@click.option("--compare", "pair", nargs=2, type=click.Path(exists=True, path_type=Path),
              help="Compare two files written by --out and print a table; exit 1 if any out "
                   "that does not stamp the code differs.")
def main(out, tasks, pair):
    """Run each task's sample and record every out's md5, or compare two such records."""
    if pair:
        before, after = (json.loads(p.read_text()) for p in pair)
        sys.exit(1 if compare(before, after) else 0)
    if out is None:
        raise click.UsageError("give --out FILE (to run) or --compare BEFORE AFTER")
    result = {name: run_task(name, RUNS[name]) for name in (tasks or sorted(RUNS))}
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    tmp.replace(out)


if __name__ == "__main__":
    main()
