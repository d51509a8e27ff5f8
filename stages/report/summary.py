"""metrics/summary.json: the one DVC metric of the pipeline, so `dvc exp show` and
`dvc metrics diff` have a column per figure people compare runs by, and no more (issue 41):
the task's headline and its main secondary figures (Task.headline_metric, secondary_metrics,
from metrics/eval.json), train's best epoch, val loss and val metric (metrics/train.json) and
the export verdict (metrics/export.json's parity). Every other figure stays in those files,
committed but not declared as metrics (`dvc metrics show metrics/eval.json` prints them).
"""
from pathlib import Path

from stages.lib.io import StageError, read_json

SUMMARY = Path("metrics/summary.json")
EVAL, TRAIN, EXPORT = Path("metrics/eval.json"), Path("metrics/train.json"), \
    Path("metrics/export.json")


def summary(task) -> dict:
    """{figure: value} from the run's metrics files, in the order above (keys flat, so the
    columns of `dvc exp show` are the bare names)."""
    wanted = [(EVAL, k) for k in (task.headline_metric, *task.secondary_metrics)]
    wanted += [(TRAIN, "best_epoch"), (TRAIN, "val_loss"), (TRAIN, f"val_{task.val_metric}"),
               (EXPORT, "parity")]
    files, out = {}, {}
    for path, key in wanted:
        if path not in files:
            if not path.is_file():
                raise StageError(f"{path} is missing: run the stage that writes it (dvc repro)")
            files[path] = read_json(path)
        if key not in files[path]:
            raise StageError(f"{path} has no '{key}' (task {task.name}): re-run the stage that "
                             f"writes it (dvc repro)")
        out[key] = files[path][key]
    other = files[EVAL].get("compare_with")  # evaluate.compare_with: the same figures beside
    if isinstance(other, dict):
        out["compare_with"] = {k: other[k] for k in (task.headline_metric,
                                                     *task.secondary_metrics) if k in other}
    return out
