"""Single-label metrics (classification, audio) on the fixed test split, and the files that
explain them.

Metrics come from scikit-learn; only the expected calibration error (which scikit-learn lacks)
is a few lines of numpy. Besides the headline numbers: per-class scores, a confusion matrix (data
for DVC and a PNG), and every misclassified input, most confident mistakes first, with a contact
sheet of the worst.
"""
from stages.lib.charts import png_bytes
from stages.lib.io import csv_bytes, json_bytes

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


def contact_sheet_png(images, rows: list[dict], thumbnail=None, cell=(2.4, 2.6),
                      what="images") -> bytes:
    """A grid of stored samples (uint8 HxWxC images), each titled with its path, truth,
    prediction and confidence; `thumbnail(ax, sample)` draws one (default: the image
    modality's), in a `cell` (width, height) in inches; `what` names them when there are none."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    if thumbnail is None:
        from stages.lib.modality.imagecore import thumbnail

    cols = max(1, min(4, len(rows)))
    lines = max(1, math.ceil(len(rows) / cols))
    fig = Figure(figsize=(cell[0] * cols, cell[1] * lines), dpi=100, layout="constrained")
    if not rows:
        fig.text(0.5, 0.5, f"no misclassified test {what}", ha="center", va="center")
    for k, (img, r) in enumerate(zip(images, rows, strict=True)):
        ax = fig.add_subplot(lines, cols, k + 1)
        thumbnail(ax, img)
        ax.set_axis_off()
        title = f"{r['path']}\ntrue {r['true']} -> {r['predicted']} ({float(r['confidence']):.2f})"
        ax.set_title(title, fontsize=7)
    return png_bytes(fig)


def evaluate(logits, y, paths, images, classes, p, thumbnail=None, cell=(2.4, 2.6),
             what="images", accuracy="accuracy") -> tuple:
    """(headline, {file name: bytes}, summary line) of a test run: see Task.evaluate. The bad
    cases are drawn by `thumbnail` in a `cell` (contact_sheet_png); `what` the inputs are and
    what the summary calls `accuracy` are the task's words (audio: clips, top-1)."""
    from stages.tasks.common.singlelabel.outputs import softmax

    probs = softmax(logits.astype("float64"))  # scipy's algorithm: exp(x - max) / sum
    pred = probs.argmax(1)
    metrics = {**headline_metrics(y, pred, len(classes)),
               **probability_metrics(y, probs, p.calibration_bins)}
    per_class = per_class_metrics(y, pred, classes)
    bad = bad_case_rows(paths, y, probs, classes)
    worst = bad[:p.bad_cases]
    index = {s: i for i, s in enumerate(paths)}
    files = {
        "per_class.json": json_bytes(per_class),
        "confusion.csv": csv_bytes([{"path": s, "actual": classes[t], "predicted": classes[q]}
                                    for s, t, q in zip(paths, y, pred, strict=True)],
                                   ["path", "actual", "predicted"]),
        "per_class_f1.csv": csv_bytes([{"class": c, "f1": f"{m['f1']:.6f}"}
                                       for c, m in per_class.items()], ["class", "f1"]),
        "confusion.png": confusion_png(y, pred, classes),
        "bad_cases.csv": csv_bytes(bad, ["path", "true", "predicted", "confidence", "top3"]),
        "bad_cases.png": contact_sheet_png([images[index[r["path"]]] for r in worst], worst,
                                           thumbnail, cell, what),
    }
    summary = (f"test {accuracy} {metrics['accuracy']:.4f}, balanced "
               f"{metrics['balanced_accuracy']:.4f}, ECE {metrics['ece']:.4f} on {len(y)} "
               f"{what}; {len(bad)} misclassified")
    return metrics, files, summary
