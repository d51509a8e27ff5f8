"""The audio task's metrics: the classification task's own code (headline, per-class scores,
calibration, confusion, bad cases; stages/tasks/classification/metrics.py, imported, not
copied), with the bad cases drawn as spectrograms (the audio modality's thumbnail)."""
from stages.tasks.classification import metrics as shared


def contact_sheet_png(samples, rows: list[dict]) -> bytes:
    """A grid of stored log-mel samples drawn as spectrograms, each titled as classification's
    bad cases are."""
    from stages.lib.modality.audiocore import thumbnail

    return shared.contact_sheet_png(samples, rows, thumbnail, cell=(2.8, 1.9), what="clips")


def evaluate(logits, y, paths, samples, classes, p) -> tuple:
    """(headline, {file name: bytes}, summary line) of a test run, as classification's
    (the same metrics and files), its bad cases drawn as spectrograms."""
    from stages.lib.io import csv_bytes, json_bytes
    from stages.tasks.classification.outputs import softmax

    probs = softmax(logits.astype("float64"))
    pred = probs.argmax(1)
    metrics = {**shared.headline_metrics(y, pred, len(classes)),
               **shared.probability_metrics(y, probs, p.calibration_bins)}
    per_class = shared.per_class_metrics(y, pred, classes)
    bad = shared.bad_case_rows(paths, y, probs, classes)
    worst = bad[:p.bad_cases]
    index = {s: i for i, s in enumerate(paths)}
    files = {
        "per_class.json": json_bytes(per_class),
        "confusion.csv": csv_bytes([{"path": s, "actual": classes[t], "predicted": classes[q]}
                                    for s, t, q in zip(paths, y, pred, strict=True)],
                                   ["path", "actual", "predicted"]),
        "per_class_f1.csv": csv_bytes([{"class": c, "f1": f"{m['f1']:.6f}"}
                                       for c, m in per_class.items()], ["class", "f1"]),
        "confusion.png": shared.confusion_png(y, pred, classes),
        "bad_cases.csv": csv_bytes(bad, ["path", "true", "predicted", "confidence", "top3"]),
        "bad_cases.png": contact_sheet_png([samples[index[r["path"]]] for r in worst], worst),
    }
    summary = (f"test top-1 {metrics['accuracy']:.4f}, balanced "
               f"{metrics['balanced_accuracy']:.4f}, ECE {metrics['ece']:.4f} on {len(y)} clips; "
               f"{len(bad)} misclassified")
    return metrics, files, summary
