"""Segmentation metrics from one pixel confusion matrix, plus the evaluation plots.

Every score comes from the K x K count of (true class, predicted class) over the labelled pixels
(the ignore value is left out): IoU = TP / (TP + FP + FN), Dice = 2 TP / (2 TP + FP + FN),
pixel accuracy = trace / total. A class absent from both the truth and the prediction has no
IoU or Dice (0 / 0): it is null in the per-class table and left out of every mean, as
torchmetrics' MeanIoU does by default. Foreground means leave class 0 (background) out.
"""
import numpy as np

IGNORE = 255  # the stored targets' ignore value (prepare maps the dataset's to it)


def confusion(truth, pred, k: int) -> np.ndarray:
    """int64 K x K counts of (truth, prediction) over the pixels whose truth is a class."""
    truth, pred = np.asarray(truth).ravel(), np.asarray(pred).ravel()
    keep = truth < k
    return np.bincount(truth[keep].astype(np.int64) * k + pred[keep], minlength=k * k
                       ).reshape(k, k)


def scores(cm: np.ndarray) -> dict:
    """{"iou": [...], "dice": [...]} per class (None where the class is in neither) and the
    pixel accuracy."""
    tp = np.diag(cm).astype(np.float64)
    fp, fn = cm.sum(0) - tp, cm.sum(1) - tp
    union = tp + fp + fn
    iou = [float(t / u) if u else None for t, u in zip(tp, union, strict=True)]
    dice = [float(2 * t / (2 * t + f + n)) if t + f + n else None
            for t, f, n in zip(tp, fp, fn, strict=True)]
    total = cm.sum()
    return {"iou": iou, "dice": dice, "pixel_accuracy": float(tp.sum() / total) if total else 0.0}


def mean(values) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def image_miou(truth, pred, k: int) -> float:
    """One image's mean IoU over the classes in its truth or prediction (1.0 when it has no
    labelled pixel)."""
    if not (np.asarray(truth) < k).any():
        return 1.0
    return mean(scores(confusion(truth, pred, k))["iou"])


PALETTE = np.array([[0, 0, 0], [230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200],
                    [245, 130, 48], [145, 30, 180], [70, 240, 240], [240, 50, 230],
                    [210, 245, 60]], dtype=np.uint8)


def colour(mask: np.ndarray) -> np.ndarray:
    """HxW class indices -> HxWx3 colours (ignore: grey)."""
    out = PALETTE[np.asarray(mask, dtype=np.int64) % len(PALETTE)]
    out[np.asarray(mask) == IGNORE] = 128
    return out


def overlay(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The image with the non-background classes blended in their colours."""
    rgb = image if image.shape[-1] == 3 else np.repeat(image, 3, axis=-1)
    blend = (0.5 * rgb + 0.5 * colour(mask)).astype(np.uint8)
    return np.where((np.asarray(mask) > 0)[..., None], blend, rgb)


def grid_png(rows: list) -> bytes:
    """A PNG of rows of equally sized HxWx3 tiles (image | truth | prediction), 2 px apart."""
    import io

    from PIL import Image

    h, w = rows[0][0].shape[:2]
    n = len(rows[0])
    sheet = np.full((len(rows) * (h + 2), n * (w + 2), 3), 255, dtype=np.uint8)
    for i, tiles in enumerate(rows):
        for j, tile in enumerate(tiles):
            sheet[i * (h + 2):i * (h + 2) + h, j * (w + 2):j * (w + 2) + w] = tile
    buf = io.BytesIO()
    Image.fromarray(sheet).save(buf, format="PNG")
    return buf.getvalue()


def per_class_png(classes, iou, dice) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from stages.lib.charts import png_bytes

    fig, ax = plt.subplots(figsize=(max(4, len(classes) * 0.9), 3))
    x = np.arange(len(classes))
    ax.bar(x - 0.2, [v or 0 for v in iou], 0.4, label="IoU")
    ax.bar(x + 0.2, [v or 0 for v in dice], 0.4, label="Dice")
    ax.set_xticks(x, classes, rotation=30, ha="right")
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right")
    ax.set_title("per-class IoU and Dice (test)")
    fig.tight_layout()
    return png_bytes(fig)


def evaluate(logits, y, paths, images, classes, p) -> tuple:
    """(metrics, {file: bytes}, summary) of N x K x H x W logits against N x H x W targets."""
    from stages.lib.io import csv_bytes, json_bytes

    k = len(classes)
    pred = logits.argmax(1).astype(np.int64)
    cm = confusion(y, pred, k)
    s = scores(cm)
    per_image = [image_miou(y[i], pred[i], k) for i in range(len(y))]
    fg_iou, fg_dice = s["iou"][1:], s["dice"][1:]
    metrics = {"miou": mean(s["iou"]), "dice": mean(s["dice"]),
               "miou_foreground": mean(fg_iou), "dice_foreground": mean(fg_dice),
               "pixel_accuracy": s["pixel_accuracy"], "samples": len(y),
               "iou_per_class": dict(zip(classes, s["iou"], strict=True)),
               "dice_per_class": dict(zip(classes, s["dice"], strict=True))}
    per_class = {c: {"iou": s["iou"][i], "dice": s["dice"][i], "pixels": int(cm[i].sum()),
                     "predicted_pixels": int(cm[:, i].sum())} for i, c in enumerate(classes)}
    cm_rows = [{"actual": a, **{q: int(cm[i, j]) for j, q in enumerate(classes)}}
               for i, a in enumerate(classes)]
    worst = sorted(range(len(y)), key=lambda i: (per_image[i], paths[i]))[:p.bad_cases]
    bad_rows = [{"path": paths[i], "miou": f"{per_image[i]:.4f}"} for i in worst]
    files = {"per_class.json": json_bytes(per_class),
             "confusion.csv": csv_bytes(cm_rows, ["actual", *classes]),
             "per_image.csv": csv_bytes([{"path": q, "miou": f"{v:.6f}"} for q, v in
                                         zip(paths, per_image, strict=True)], ["path", "miou"]),
             "bad_cases.csv": csv_bytes(bad_rows, ["path", "miou"]),
             "per_class_iou.png": per_class_png(classes, s["iou"], s["dice"]),
             "per_class_iou.csv": csv_bytes(  # for `dvc plots`: one bar per class
                 [{"class": c, "iou": "" if v is None else f"{v:.6f}"}
                  for c, v in zip(classes, s["iou"], strict=True)], ["class", "iou"])}
    if worst:
        files["bad_cases.png"] = grid_png([(np.asarray(images[i]) if images[i].shape[-1] == 3
                                            else np.repeat(images[i], 3, -1),
                                            overlay(images[i], y[i]), overlay(images[i], pred[i]))
                                           for i in worst])
    def f(v):
        return "n/a" if v is None else f"{v:.4f}"

    summary = (f"test mIoU {f(metrics['miou'])} (foreground {f(metrics['miou_foreground'])}), "
               f"Dice {f(metrics['dice'])}, pixel accuracy {f(metrics['pixel_accuracy'])} on "
               f"{len(y)} images")
    return metrics, files, summary
