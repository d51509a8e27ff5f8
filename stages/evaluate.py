"""Evaluate models/model.pt on the fixed test split (never on train or val data).

The test images come from data/processed/, so the model sees them through exactly the
preprocessing it was trained with. The task turns the model's outputs into its standard metrics:
every figure goes to metrics/eval.json (the report copies the compared ones to
metrics/summary.json, the one DVC metric), the
files that explain it (classification: per-class scores, confusion matrix, bad cases) to
plots/eval/.
"""
from pathlib import Path

import click

from stages.lib.io import StageError, write_folder, write_json
from stages.lib.params import params_option

MODEL = Path("models/model.pt")
METRICS = Path("metrics/eval.json")
DETAILS = Path("plots/eval")


@click.command()
@params_option
def main(params_path):
    """Evaluate the model on the test split: the task's metrics, plots and bad cases.

    Writes metrics/eval.json (the headline) and plots/eval/ (classification: per_class.json,
    confusion.csv and .png, per_class_f1.csv, bad_cases.csv and .png). Reads `task` and
    `evaluate.{batch_size,bad_cases,calibration_bins,compare_with}` from the params file;
    with compare_with, that model's metrics on the same test set go beside them.
    """
    from stages.tasks import load_model, open_stage

    task, params, _ = open_stage("evaluate", params_path)  # first: params that do not fit stop
    p = params["evaluate"]
    from stages.lib.train.kernels import use_trained

    kernels = use_trained(params["train"], click.echo)  # before torch loads: the model's kernels
    from stages.lib.model.models import no_weights, predict_bucketed, predict_outputs
    from stages.lib.model.provenance import run_record, write_run_record
    from stages.lib.data.shards import Mapped, View, samples_view, load_test, load_widths

    from stages.lib.train.cores import stage_threads

    stage_threads(not kernels["threads_fixed"])  # a queue's share, unless train.threads
    model, meta = load_model(MODEL)
    x, y, paths = load_test()
    y = y[:]  # the targets (small: one per image); the pixels stay in the memory-mapped shards
    widths = load_widths("test")  # prepare.width_buckets: each line at its bucket width

    def outputs_of(m, x=x):
        return (predict_outputs(m, x, p.batch_size) if widths is None  # normalised per batch
                else predict_bucketed(m, x, widths, task, p.batch_size))

    images = samples_view("test")  # uint8, what the model saw

    def views_of(m, m_meta) -> dict:
        """{"views": the outputs of each of the task's test-time views} (speech: what its
        confidence reads, as predict's does), or {} when it has none."""
        made = [predict_outputs(m, Mapped(images, f, m_meta["mean"], m_meta["std"],
                                          task.modality_name), p.batch_size)
                for f in task.views(m_meta)] if widths is None else []
        return {"views": made} if made else {}

    outputs = outputs_of(model)
    metrics, files, summary = task.evaluate(outputs, y, paths, images, meta, p,
                                            **views_of(model, meta))
    if not no_weights(p.compare_with):  # an earlier model on the same test set, side by side
        old, old_meta = load_model(p.compare_with)
        shape_of = task.modality.shape_of  # what the stored samples look like
        differ = [k for k in ("task", *task.meta_keys) if old_meta.get(k) != meta.get(k)] + [
            k for k, v in shape_of(old_meta).items() if v != shape_of(meta)[k]]
        if differ:
            raise StageError(f"evaluate.compare_with: {p.compare_with} was trained with other "
                             f"{', '.join(differ)} than models/model.pt; it cannot be scored "
                             f"on this test set.")
        # the same pixels, normalised as that model was trained (prepare.mean/std: auto moves
        # a little when images are added)
        old_x = View(x.split, x.kind, old_meta["mean"], old_meta["std"])
        old_metrics = task.evaluate(outputs_of(old, old_x), y, paths, images, old_meta, p,
                                    **views_of(old, old_meta))[0]
        metrics = {**metrics, "compare_with": {"model": p.compare_with, **old_metrics}}
        summary += f"; {p.compare_with} on the same test set: see compare_with in {METRICS}"
    if widths is not None:  # how many test lines ran at each width
        metrics = {**metrics, "width_buckets": {
            str(w): int((widths == w).sum()) for w in sorted(set(widths.tolist()))}}
        summary += (f"; each line run at its width bucket ("
                    f"{', '.join(f'{w}: {n}' for w, n in metrics['width_buckets'].items())} "
                    f"lines)")
    write_json(METRICS, metrics)
    write_folder(DETAILS, files)  # the folder appears whole: no file of an earlier run beside it
    write_run_record("evaluate", {**run_record("evaluate", p), "metrics": metrics})
    click.echo(f"evaluate: {summary}")


if __name__ == "__main__":
    main()
