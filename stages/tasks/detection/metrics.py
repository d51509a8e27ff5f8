"""Detection evaluation on the fixed test split: COCO mAP through torchmetrics'
MeanAveragePrecision (faster_coco_eval backend), precision/recall at evaluate.score_threshold,
a precision-recall plot, and bad cases (missed objects, confident false positives) drawn on
their images."""
import numpy as np

from stages.lib.io import csv_bytes, json_bytes
from stages.tasks.detection.boxes import detections, iou_matrix

MIN_SCORE = 0.001


def truths(targets) -> list:
    """Per image T x 5 [class, x1, y1, x2, y2] without the padding rows."""
    return [t[t[:, 0] >= 0] for t in np.asarray(targets)]


def coco_map(dets: list, gts: list, num_classes: int) -> dict:
    """torchmetrics' COCO mAP of per-image detections (D x 6) against truths (T x 5)."""
    import torch
    from torchmetrics.detection import MeanAveragePrecision

    metric = MeanAveragePrecision(box_format="xyxy", iou_type="bbox", class_metrics=True,
                                  backend="faster_coco_eval")
    preds = [{"boxes": torch.tensor(d[:, :4], dtype=torch.float32).reshape(-1, 4),
              "scores": torch.tensor(d[:, 4], dtype=torch.float32),
              "labels": torch.tensor(d[:, 5], dtype=torch.int64)} for d in dets]
    target = [{"boxes": torch.tensor(t[:, 1:], dtype=torch.float32).reshape(-1, 4),
               "labels": torch.tensor(t[:, 0], dtype=torch.int64)} for t in gts]
    metric.update(preds, target)
    out = metric.compute()
    per_class = {}
    classes = out["classes"].reshape(-1).tolist()
    for c, ap in zip(classes, out["map_per_class"].reshape(-1).tolist(), strict=True):
        per_class[int(c)] = float(ap)
    # COCO's areas: small under 32 x 32 input pixels, large over 96 x 96 (-1: none in the set)
    return {"map": float(out["map"]), "map50": float(out["map_50"]),
            "map75": float(out["map_75"]), "map_small": float(out["map_small"]),
            "map_medium": float(out["map_medium"]), "map_large": float(out["map_large"]),
            "per_class": per_class}


def pr_at(dets, gts, threshold: float, iou: float = 0.5):
    """(true positives, false positives, false negatives, per-image [(kind, row)] mistakes) at
    a score threshold, matching greedily (best score first) at IoU >= iou, same class."""
    tp = fp = fn = 0
    mistakes = []
    for d, t in zip(dets, gts, strict=True):
        d = d[d[:, 4] >= threshold]
        taken = np.zeros(len(t), bool)
        overlaps = iou_matrix(d[:, :4], t[:, 1:]) if len(d) and len(t) else None
        wrong = []
        for k in np.argsort(-d[:, 4], kind="stable"):
            j = -1
            if overlaps is not None:
                cand = np.where(~taken & (t[:, 0] == d[k, 5]), overlaps[k], -1.0)
                j = int(cand.argmax()) if cand.max() >= iou else -1
            if j >= 0:
                taken[j] = True
                tp += 1
            else:
                fp += 1
                wrong.append(("false_positive", d[k]))
        fn += int((~taken).sum())
        wrong += [("missed", t[j]) for j in np.nonzero(~taken)[0]]
        mistakes.append(wrong)
    return tp, fp, fn, mistakes


def pr_curve(dets, gts, num_classes: int) -> dict:
    """{class: (recall, precision) arrays} at IoU 0.5 over all score thresholds."""
    curves = {}
    for c in range(num_classes):
        scored, total = [], 0
        for d, t in zip(dets, gts, strict=True):
            dc, tc = d[d[:, 5] == c], t[t[:, 0] == c]
            total += len(tc)
            taken = np.zeros(len(tc), bool)
            ov = iou_matrix(dc[:, :4], tc[:, 1:]) if len(dc) and len(tc) else None
            for k in np.argsort(-dc[:, 4], kind="stable"):
                hit = False
                if ov is not None:
                    cand = np.where(~taken, ov[k], -1.0)
                    j = int(cand.argmax())
                    if cand[j] >= 0.5:
                        taken[j] = hit = True
                scored.append((float(dc[k, 4]), hit))
        scored.sort(key=lambda s: -s[0])
        hits = np.array([h for _, h in scored], dtype=float)
        tp = np.cumsum(hits)
        precision = tp / np.arange(1, len(hits) + 1) if len(hits) else np.zeros(0)
        curves[c] = (tp / max(total, 1), precision)
    return curves


def pr_rows(curves, classes) -> list[dict]:
    """The PR curves as rows (class, recall, precision), for `dvc plots`: one line per class,
    starting at recall 0 (precision 1), values rounded to 6 places so the file is stable."""
    rows = []
    for c, (recall, precision) in sorted(curves.items()):
        points = [(0.0, 1.0), *zip(recall.tolist(), precision.tolist(), strict=True)]
        rows += [{"class": str(classes[c]), "recall": f"{r:.6f}", "precision": f"{q:.6f}"}
                 for r, q in points]
    return rows


def pr_png(curves, classes) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from stages.lib.charts import png_bytes

    fig = Figure(figsize=(4.5, 4), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    for c, (recall, precision) in curves.items():
        ax.plot(recall, precision, label=str(classes[c]))
    ax.set_xlim(0, 1.01)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    ax.set_title("precision-recall at IoU 0.5, test split")
    ax.legend(loc="lower left", fontsize=8)
    return png_bytes(fig)


def grid_png(images, items, classes, title: str) -> bytes:
    """A grid of images with their true boxes (green) and predicted boxes (red, with score);
    items: [(index into images, path, truths T x 5, detections D x 6)]."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    from stages.lib.charts import png_bytes
    from stages.lib.modality.imagecore import thumbnail

    cols = max(1, min(4, len(items)))
    lines = max(1, math.ceil(len(items) / cols))
    fig = Figure(figsize=(2.6 * cols, 2.8 * lines), dpi=100, layout="constrained")
    if not items:
        fig.text(0.5, 0.5, f"no {title}", ha="center", va="center")
    for k, (i, path, t, d) in enumerate(items):
        ax = fig.add_subplot(lines, cols, k + 1)
        thumbnail(ax, images[i])
        for _, x1, y1, x2, y2 in t:
            ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, color="lime", lw=1))
        for x1, y1, x2, y2, s, c in d:
            ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, color="red", lw=1))
            ax.text(x1, y1, f"{classes[int(c)]} {s:.2f}", color="red", fontsize=5, va="bottom")
        ax.set_axis_off()
        ax.set_title(path, fontsize=6)
    return png_bytes(fig)


def evaluate(outputs, targets, paths, images, classes, p) -> tuple:
    """(metrics, {file: bytes}, summary) of the detector's decoded test outputs."""
    dets = [detections(o, MIN_SCORE) for o in np.asarray(outputs)]
    gts = truths(targets)
    m = coco_map(dets, gts, len(classes))
    tp, fp, fn, mistakes = pr_at(dets, gts, p.score_threshold)
    per_class = {str(classes[c]): {"ap": m["per_class"].get(c, 0.0),
                                   "boxes": int(sum((t[:, 0] == c).sum() for t in gts))}
                 for c in range(len(classes))}
    metrics = {"map": m["map"], "map50": m["map50"], "map75": m["map75"],
               "map_small": m["map_small"], "map_medium": m["map_medium"],
               "map_large": m["map_large"],
               "precision": tp / max(tp + fp, 1), "recall": tp / max(tp + fn, 1),
               "score_threshold": p.score_threshold, "images": len(gts),
               "boxes": int(sum(len(t) for t in gts)), "per_class_ap": {
                   c: v["ap"] for c, v in per_class.items()}}
    rows = [{"path": paths[i], "kind": kind, "class": str(classes[int(r[0] if kind == "missed"
                                                                       else r[5])]),
             "score": "" if kind == "missed" else f"{r[4]:.4f}",
             "box": " ".join(f"{v:.1f}" for v in (r[1:5] if kind == "missed" else r[:4]))}
            for i, wrong in enumerate(mistakes) for kind, r in wrong]
    rows.sort(key=lambda r: (r["kind"] != "missed", -float(r["score"] or 0), r["path"]))
    worst = sorted({i for i, w in enumerate(mistakes) if w},
                   key=lambda i: (-len(mistakes[i]), paths[i]))[:p.bad_cases]
    shown = [(i, paths[i], gts[i], dets[i][dets[i][:, 4] >= p.score_threshold]) for i in worst]
    sample = [(i, paths[i], gts[i], dets[i][dets[i][:, 4] >= p.score_threshold])
              for i in range(min(len(gts), 12))]
    curves = pr_curve(dets, gts, len(classes))
    files = {
        "per_class.json": json_bytes(per_class),
        "pr_curve.png": pr_png(curves, classes),
        "pr_curve.csv": csv_bytes(pr_rows(curves, classes), ["class", "recall", "precision"]),
        "bad_cases.csv": csv_bytes(rows, ["path", "kind", "class", "score", "box"]),
        "bad_cases.png": grid_png(images, shown, classes, "mistakes"),
        "predictions.png": grid_png(images, sample, classes, "test images"),
    }
    summary = (f"test mAP50 {m['map50']:.4f}, mAP50-95 {m['map']:.4f}, precision "
               f"{metrics['precision']:.3f} / recall {metrics['recall']:.3f} at score "
               f"{p.score_threshold} on {len(gts)} images ({metrics['boxes']} boxes)")
    return metrics, files, summary
