"""Evaluate models/model.pt on the fixed test split (never on train or val data).

The test images come from data/processed/, so the model sees them through exactly the
preprocessing it was trained with. Metrics come from scikit-learn; only the expected calibration
error (which scikit-learn lacks) is a few lines of numpy. Besides the headline numbers the stage
writes what explains them: per-class scores, a confusion matrix (data for DVC and a PNG), and
every misclassified image, most confident mistakes first, with a contact sheet of the worst.
"""
from pathlib import Path

import click

from stages.lib.charts import png_bytes
from stages.lib.io import StageError, read_csv, write_bytes, write_csv, write_json
from stages.lib.params import load, params_option

MODEL = Path("models/model.pt")
TEST_SPLIT = Path("data/split/test.csv")
TEST_IMAGES = Path("data/processed/test_x.npy")
METRICS = Path("metrics/eval.json")
PER_CLASS = Path("metrics/eval_per_class.json")
CONFUSION = Path("plots/confusion.csv")
CONFUSION_PNG = Path("plots/confusion.png")
PER_CLASS_F1 = Path("plots/per_class_f1.csv")
BAD_CASES = Path("plots/bad_cases.csv")
BAD_CASES_PNG = Path("plots/bad_cases.png")
TOP_K = 5  # top-5 accuracy is reported when there are more than 5 classes


def headline_metrics(y_true, y_pred, n_classes: int | None = None) -> dict:
    """Label-based headline metrics; macro averages weigh every class equally."""
    import numpy as np
    from sklearn.metrics import (accuracy_score, balanced_accuracy_score,
                                 precision_recall_fscore_support)

    labels = np.arange(n_classes if n_classes else max(max(y_true), max(y_pred)) + 1)
    metrics = {"accuracy": float(accuracy_score(y_true, y_pred)),
               "balanced_accuracy": float(balanced_accuracy_score(y_true, y_pred)),
               "samples": len(y_true)}
    for average in ("macro", "weighted"):
        precision, recall, f1, _ = precision_recall_fscore_support(
            y_true, y_pred, labels=labels, average=average, zero_division=0)
        metrics.update({f"precision_{average}": float(precision),
                        f"recall_{average}": float(recall), f"f1_{average}": float(f1)})
    return metrics


def per_class_metrics(y_true, y_pred, classes) -> dict:
    """{class: {precision, recall, f1, support}} for every class, in class order."""
    from sklearn.metrics import precision_recall_fscore_support

    scores = precision_recall_fscore_support(y_true, y_pred, labels=list(range(len(classes))),
                                             zero_division=0)
    return {c: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for c, p, r, f, s in zip(classes, *scores, strict=True)}


def expected_calibration_error(confidence, correct, bins: int) -> float:
    """sum over equal-width confidence bins (lo, hi] of |bin| / n * |accuracy - mean confidence|.

    Within a bin |acc - conf| * |bin| / n equals |sum(correct) - sum(confidence)| / n.
    """
    import numpy as np

    confidence = np.asarray(confidence, dtype=np.float64)
    index = np.clip(np.ceil(confidence * bins).astype(np.int64) - 1, 0, bins - 1)
    hits = np.bincount(index, weights=np.asarray(correct, dtype=np.float64), minlength=bins)
    conf = np.bincount(index, weights=confidence, minlength=bins)
    return float(np.abs(hits - conf).sum() / len(confidence))


def probability_metrics(y_true, probs, bins: int) -> dict:
    """Top-5 accuracy (when there are more than 5 classes) and expected calibration error."""
    import numpy as np
    from sklearn.metrics import top_k_accuracy_score

    probs = np.asarray(probs, dtype=np.float64)
    metrics = {"ece": expected_calibration_error(probs.max(1), probs.argmax(1) == y_true, bins)}
    if probs.shape[1] > TOP_K:
        metrics[f"top{TOP_K}_accuracy"] = float(top_k_accuracy_score(
            y_true, probs, k=TOP_K, labels=np.arange(probs.shape[1])))
    return metrics


def softmax(logits):
    from scipy.special import softmax as _softmax

    return _softmax(logits.astype("float64"), axis=1)


def bad_case_rows(paths, y_true, probs, classes) -> list[dict]:
    """Every misclassified image: most confident mistake first, ties broken by path."""
    import numpy as np

    rows = []
    for path, t, p in zip(paths, y_true, probs, strict=True):
        pred = int(p.argmax())
        if pred == t:
            continue
        top3 = np.argsort(-p, kind="stable")[:3]
        rows.append({"path": path, "true": classes[t], "predicted": classes[pred],
                     "confidence": float(p[pred]),
                     "top3": " ".join(f"{classes[i]}:{p[i]:.4f}" for i in top3)})
    rows.sort(key=lambda r: (-r["confidence"], r["path"]))
    return [{**r, "confidence": f"{r['confidence']:.6f}"} for r in rows]


def confusion_png(y_true, y_pred, classes) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    from matplotlib.figure import Figure
    from sklearn.metrics import confusion_matrix

    cm = confusion_matrix(y_true, y_pred, labels=list(range(len(classes))))
    size = 2 + 0.45 * len(classes)
    fig = Figure(figsize=(size, size), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.imshow(cm, cmap="Blues")
    for (i, j), n in np.ndenumerate(cm):
        if n:
            ax.text(j, i, str(n), ha="center", va="center", fontsize=8,
                    color="white" if n > cm.max() / 2 else "black")
    ax.set_xticks(range(len(classes)), classes, rotation=90)
    ax.set_yticks(range(len(classes)), classes)
    ax.set_xlabel("predicted")
    ax.set_ylabel("actual")
    ax.set_title(f"confusion matrix, {len(y_true)} test images")
    return png_bytes(fig)


def contact_sheet_png(images, rows: list[dict]) -> bytes:
    """A grid of uint8 HxWxC images, each titled with its path, truth, prediction, confidence."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    cols = max(1, min(4, len(rows)))
    lines = max(1, math.ceil(len(rows) / cols))
    fig = Figure(figsize=(2.4 * cols, 2.6 * lines), dpi=100, layout="constrained")
    if not rows:
        fig.text(0.5, 0.5, "no misclassified test images", ha="center", va="center")
    for k, (img, r) in enumerate(zip(images, rows, strict=True)):
        ax = fig.add_subplot(lines, cols, k + 1)
        grey = img.shape[-1] == 1
        ax.imshow(img[..., 0] if grey else img, cmap="gray" if grey else None, vmin=0, vmax=255,
                  interpolation="nearest")
        ax.set_axis_off()
        title = f"{r['path']}\ntrue {r['true']} -> {r['predicted']} ({float(r['confidence']):.2f})"
        ax.set_title(title, fontsize=7)
    return png_bytes(fig)


@click.command()
@params_option
def main(params_path):
    """Evaluate the model on the test split: metrics, per-class scores, plots and bad cases.

    Writes metrics/eval.json (headline), metrics/eval_per_class.json, plots/confusion.csv,
    plots/confusion.png, plots/per_class_f1.csv, plots/bad_cases.csv and plots/bad_cases.png.
    Reads `evaluate.{batch_size,bad_cases,calibration_bins}` from the params file.
    """
    p = load("evaluate", params_path)
    for key in ("batch_size", "calibration_bins"):
        if getattr(p, key) < 1:
            raise StageError(f"evaluate.{key} must be at least 1, got {getattr(p, key)}.")
    if p.bad_cases < 0:
        raise StageError(f"evaluate.bad_cases must be 0 or more, got {p.bad_cases}.")
    import numpy as np

    from stages.lib.images import load_processed
    from stages.lib.models import load_model, predict_logits
    from stages.lib.provenance import run_record, write_run_record

    model, meta = load_model(MODEL)
    classes = meta["classes"]
    x, y, _ = load_processed("test")
    paths = [r["path"] for r in read_csv(TEST_SPLIT)]
    if len(paths) != len(y) or not len(y):
        raise StageError(f"{TEST_SPLIT} lists {len(paths)} images but data/processed holds "
                         f"{len(y)} test images: run `dvc repro` to rebuild them.")
    probs = softmax(predict_logits(model, x, p.batch_size))
    pred = probs.argmax(1)

    metrics = {**headline_metrics(y, pred, len(classes)),
               **probability_metrics(y, probs, p.calibration_bins)}
    per_class = per_class_metrics(y, pred, classes)
    write_json(METRICS, metrics)
    write_json(PER_CLASS, per_class)
    write_csv(CONFUSION, [{"path": s, "actual": classes[t], "predicted": classes[q]}
                          for s, t, q in zip(paths, y, pred, strict=True)],
              ["path", "actual", "predicted"])
    write_csv(PER_CLASS_F1, [{"class": c, "f1": f"{m['f1']:.6f}"} for c, m in per_class.items()],
              ["class", "f1"])
    write_bytes(CONFUSION_PNG, confusion_png(y, pred, classes))
    bad = bad_case_rows(paths, y, probs, classes)
    write_csv(BAD_CASES, bad, ["path", "true", "predicted", "confidence", "top3"])
    worst = bad[:p.bad_cases]
    index = {s: i for i, s in enumerate(paths)}
    raw = np.load(TEST_IMAGES, allow_pickle=False)  # uint8, what the model saw
    write_bytes(BAD_CASES_PNG, contact_sheet_png([raw[index[r["path"]]] for r in worst], worst))
    write_run_record("evaluate", {**run_record("evaluate", p), "metrics": metrics})
    click.echo(f"evaluate: test accuracy {metrics['accuracy']:.4f}, balanced "
               f"{metrics['balanced_accuracy']:.4f}, ECE {metrics['ece']:.4f} on {len(y)} images; "
               f"{len(bad)} misclassified")


if __name__ == "__main__":
    main()
