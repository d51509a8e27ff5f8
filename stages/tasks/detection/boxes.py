"""Box helpers shared by evaluate, export's parity gate, predict and serve: numpy only (the
ONNX path of predict and serve never imports torch).

The model's (and the ONNX graph's) output is N x K x 6: per image its K best peaks as
[x1, y1, x2, y2, score, class] in model-input pixels, best first. `detections` turns one image's
rows into the final list: score threshold, then class-wise NMS, the same everywhere.
"""
import numpy as np

NMS_IOU = 0.6  # class-wise NMS of overlapping peaks (CenterNet's max-pool leaves few)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of a (Nx4 xyxy) with every box of b (Mx4)."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(axis=2)
    area_a = np.clip(a[:, 2:] - a[:, :2], 0, None).prod(axis=1)
    area_b = np.clip(b[:, 2:] - b[:, :2], 0, None).prod(axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def nms(boxes, scores, classes, iou: float = NMS_IOU) -> np.ndarray:
    """Indices kept by class-wise greedy NMS, best score first (ties: lower index first)."""
    order = np.argsort(-np.asarray(scores, np.float64), kind="stable")
    keep = []
    overlaps = iou_matrix(boxes, boxes)
    for i in order.tolist():
        if all(classes[j] != classes[i] or overlaps[i, j] <= iou for j in keep):
            keep.append(i)
    return np.asarray(keep, dtype=np.int64)


def detections(rows: np.ndarray, score_threshold: float, iou: float = NMS_IOU) -> np.ndarray:
    """One image's final detections (D x 6, best first) from its K x 6 output rows."""
    rows = np.asarray(rows, np.float32).reshape(-1, 6)
    rows = rows[rows[:, 4] >= score_threshold]
    if not len(rows):
        return rows
    return rows[nms(rows[:, :4], rows[:, 4], rows[:, 5].astype(np.int64), iou)]


def match(reference: np.ndarray, candidate: np.ndarray, min_iou: float,
          corner_tol: float = 0.0):
    """One-to-one greedy matching of two detection lists (D x 6) of one image: same class,
    IoU >= min_iou, best reference score first. (pairs [(i, j)], unmatched count).
    corner_tol > 0: two boxes whose corners all differ by at most that many pixels match too
    (IoU says nothing about a degenerate box: a zero-height box has IoU 0 with itself)."""
    if not len(reference) or not len(candidate):
        return [], len(reference) + len(candidate)
    overlaps = iou_matrix(reference[:, :4], candidate[:, :4])
    if corner_tol > 0:
        gap = np.abs(reference[:, None, :4].astype(np.float64) - candidate[None, :, :4])
        overlaps = np.where(gap.max(axis=2) <= corner_tol, np.maximum(overlaps, 1.0), overlaps)
    used, pairs = set(), []
    for i in np.argsort(-reference[:, 4], kind="stable").tolist():
        best, best_iou = -1, min_iou
        for j in range(len(candidate)):
            if j in used or int(candidate[j, 5]) != int(reference[i, 5]):
                continue
            if overlaps[i, j] >= best_iou:
                best, best_iou = j, overlaps[i, j]
        if best >= 0:
            used.add(best)
            pairs.append((i, best))
    return pairs, len(reference) + len(candidate) - 2 * len(pairs)


def to_original(dets: np.ndarray, image_size: int, size, letterbox=False) -> np.ndarray:
    """Boxes from model-input pixels (a square image_size input: squashed, or letterboxed,
    stages.lib.modality.imagecore.letterbox_geometry) to the original image's pixels (size: its
    upright (width, height)), the padding taken off and the scale undone, clipped to the
    image."""
    from stages.lib.modality.imagecore import letterbox_geometry

    out = np.asarray(dets, np.float64).copy()
    if not len(out) or size is None:
        return out
    w, h = size
    left, top, sw, sh = (letterbox_geometry(size, image_size) if letterbox
                         else (0, 0, image_size, image_size))
    out[:, [0, 2]] = np.clip((out[:, [0, 2]] - left) * w / sw, 0, w)
    out[:, [1, 3]] = np.clip((out[:, [1, 3]] - top) * h / sh, 0, h)
    return out


def ap_at(dets: list, truths: list, iou: float = 0.5, classes: int = 1) -> float:
    """Mean over classes (with ground truth) of COCO-style 101-point interpolated AP at one IoU
    threshold. dets: per image D x 6 arrays; truths: per image T x 5 [class, x1, y1, x2, y2].
    A hand-written check of torchmetrics (tests) and train's per-epoch val mAP50."""
    aps = []
    for c in range(classes):
        scored, total = [], 0
        for d, t in zip(dets, truths, strict=True):
            d = d[d[:, 5] == c] if len(d) else d.reshape(0, 6)
            t = t[t[:, 0] == c] if len(t) else t.reshape(0, 5)
            total += len(t)
            order = np.argsort(-d[:, 4], kind="stable")
            d = d[order]
            taken = np.zeros(len(t), bool)
            overlaps = iou_matrix(d[:, :4], t[:, 1:]) if len(t) and len(d) else None
            for k in range(len(d)):
                hit = False
                if overlaps is not None:
                    cand = np.where(~taken, overlaps[k], -1.0)
                    j = int(cand.argmax())
                    if cand[j] >= iou:
                        taken[j], hit = True, True
                scored.append((float(d[k, 4]), hit))
        if not total:
            continue
        scored.sort(key=lambda s: -s[0])
        tp = np.cumsum([h for _, h in scored]) if scored else np.zeros(0)
        fp = np.cumsum([not h for _, h in scored]) if scored else np.zeros(0)
        recall = tp / total
        precision = tp / np.maximum(tp + fp, 1e-12)
        for k in range(len(precision) - 2, -1, -1):  # monotone envelope
            precision[k] = max(precision[k], precision[k + 1])
        grid = np.linspace(0, 1, 101)
        idx = np.searchsorted(recall, grid, side="left")
        aps.append(float(np.mean([precision[i] if i < len(precision) else 0.0 for i in idx])))
    return float(np.mean(aps)) if aps else 0.0
