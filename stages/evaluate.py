"""Evaluate models/model.pt on the fixed test split (never on train or val data).

Metrics come from scikit-learn; plots/confusion.csv holds one (actual, predicted) row per
test image for DVC's `confusion` plot template.
"""
from pathlib import Path

import click

from stages.lib.io import read_csv, write_csv, write_json
from stages.lib.params import load, params_option

MODEL = Path("models/model.pt")
TEST_SPLIT = Path("data/split/test.csv")
METRICS = Path("metrics/eval.json")
CONFUSION = Path("plots/confusion.csv")


def headline_metrics(y_true, y_pred) -> dict:
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support

    precision, recall, f1, _ = precision_recall_fscore_support(
        y_true, y_pred, average="macro", zero_division=0)
    return {"accuracy": float(accuracy_score(y_true, y_pred)), "precision_macro": float(precision),
            "recall_macro": float(recall), "f1_macro": float(f1), "samples": len(y_true)}


@click.command()
@params_option
def main(params_path):
    """Write metrics/eval.json and plots/confusion.csv for the test split.

    Reads `evaluate.batch_size` from the params file.
    """
    p = load("evaluate", params_path)
    from stages.lib.images import load_processed
    from stages.lib.models import load_model, predict_logits
    from stages.lib.provenance import run_record, write_run_record

    model, meta = load_model(MODEL)
    x, y, _ = load_processed("test")
    pred = predict_logits(model, x, p.batch_size).argmax(1)
    metrics = headline_metrics(y, pred)
    write_json(METRICS, metrics)
    write_run_record("evaluate", {**run_record("evaluate", p), "metrics": metrics})
    classes = meta["classes"]
    rows = [{"path": r["path"], "actual": classes[t], "predicted": classes[q]}
            for r, t, q in zip(read_csv(TEST_SPLIT), y, pred, strict=True)]
    write_csv(CONFUSION, rows, ["path", "actual", "predicted"])
    click.echo(f"evaluate: test accuracy {metrics['accuracy']:.4f} on {len(y)} images")


if __name__ == "__main__":
    main()
