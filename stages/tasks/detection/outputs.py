"""Detector outputs -> predict's rows and serve's answers (numpy only: no torch)."""
from stages.tasks.detection.boxes import detections, to_original

DEFAULT_SCORE = 0.3  # when neither the model's metadata nor --score-threshold gives one


def decode(outputs, meta) -> list[dict]:
    """Per image: {"boxes": [{label, score, x1, y1, x2, y2}]} in the original image's pixels
    (meta["source_sizes"][i]: (width, height); model-input pixels when unknown; through the
    letterbox when meta["letterbox"]), best first,
    above meta["score_threshold"], after the shared class-wise NMS."""
    classes = meta["classes"]
    threshold = meta.get("score_threshold")
    threshold = DEFAULT_SCORE if threshold is None else threshold
    sizes = meta.get("source_sizes") or [None] * len(outputs)
    out = []
    for rows, size in zip(outputs, sizes, strict=True):
        dets = to_original(detections(rows, threshold), meta["image_size"], size,
                           meta.get("letterbox"))
        out.append({"boxes": [{"label": str(classes[int(d[5])]), "score": round(float(d[4]), 6),
                               **{k: round(float(v), 2) for k, v in
                                  zip(("x1", "y1", "x2", "y2"), d[:4], strict=True)}}
                              for d in dets]})
    return out
