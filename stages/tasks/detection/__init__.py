"""Object detection: boxes from YOLO or COCO datasets, a small anchor-free detector of our own
(CenterNet-style), COCO mAP on the fixed test split, boxes out of predict and serve."""
from stages.tasks.base import Task
from stages.tasks.detection import checks

MIN_SCORE = 0.001  # detections below this never count (mAP is computed over the rest)
SCORE_TOL = 0.01  # export parity: matched detections' scores may differ by this much
CORNER_TOL = 0.01  # export parity: boxes whose corners agree within this many pixels match
FIT_CAP = 320  # tools.init never fits a larger input (CPU-sized; set prepare.image_size above)


class Detection(Task):
    name = "detection"
    annotation_fields = ("boxes", "annotation_sha256", "declared_size")
    checks = checks.CHECKS
    annotation_errors = ("orphan_label", "missing", "coco_unknown_image", "coco_bad_value",
                         "coco_duplicate_id", "coco_duplicate_file", "too_many_boxes")
    meta_keys = ("classes", "max_boxes")
    target_dtype = "float32"
    val_metric = "map50"
    output_names = ("detections",)
    agreement_name = "detection_agreement"
    headline_metric = "map50"
    secondary_metrics = ("map", "precision", "recall")
    # what a project on one's own data starts from (tools.init), and the built-in sample too
    recipe = {
        "train.model": "centernet_small", "train.epochs": 100, "train.batch_size": 16,
        "train.lr": 0.003, "train.warmup_epochs": 1, "train.aug_hflip": 0.5,
        "train.aug_crop_scale": 0.6, "train.aug_zoom_out": 1.5, "train.ema": 0.998,
        "train.best_metric": "val_metric",
        "export.atol": 0.001, "export.rtol": 0.001,
    }
    # what the built-in sample needs besides `task: detection` (docs/detection.md, tests,
    # acceptance run). Its 160 px images train at 224: a stride-4 cell is then 2.9 original
    # pixels, not 4, and the small objects' centres and sides are that much finer (test
    # mAP50-95 0.865 against 0.811 at 160, for 1.75x the train CPU; docs/benchmarks.md).
    sample_params = {
        "data.source": "data/sample", "prepare.image_size": 224, "prepare.channels": 3,
        "prepare.mean": [0.5, 0.5, 0.5], "prepare.std": [0.25, 0.25, 0.25],
        "split.by": "given", "validate.near_dup_distance": -1, **recipe,
    }
    layouts = ("YOLO (data.yaml with `names`, images/<split>/ and labels/<split>/*.txt) or COCO "
               "(annotations/instances_<split>.json beside the images)")
    revisit = (
        ("train.epochs", "100 suits the 1,000-image sample; a larger set needs fewer epochs "
                         "for the same steps"),
        ("prepare.image_size", "small objects need more pixels: raise it (a multiple of 32) "
                               "at the cost of speed"),
        ("train.aug_hflip", "0.5: off when mirroring changes a class (text, arrows, left/right)"),
        ("evaluate.score_threshold", "0.3: the score above which predict, serve and the "
                                     "report count a detection"),
        ("validate.require_labels", "false: an image without a label file is background; true "
                                    "when every image should have boxes"),
    )

    # model.py's CENTERNETS, then torchvision_detectors.py's DETECTORS (a test keeps them equal)
    models = ("centernet_small", "centernet_medium", "fasterrcnn_mobilenet_v3_large_320_fpn",
              "ssdlite320_mobilenet_v3_large", "fcos_resnet50_fpn", "retinanet_resnet50_fpn")
    task_keys = ("sample.images", "validate.min_box_px", "validate.box_tolerance",
                 "validate.max_boxes",
                 "validate.require_labels", "evaluate.score_threshold",
                 "export.score_threshold", "train.aug_zoom_out")
    # photos: RGB (auto still gives grey when every image is); the backbones stride to 1/32
    channels = (3, "auto")
    min_image_size = 32

    def sample(self, p):
        from stages.tasks.detection.sample import shapes

        return shapes(p.images or 1000)

    def read_settings(self, params):
        return {"max_boxes": params["validate"].max_boxes}  # an image's boxes, capped as read

    def read_annotations(self, source, listing, settings):
        from stages.lib.params import MAX_BOXES
        from stages.tasks.detection.annotations import read_annotations

        return read_annotations(source, listing, settings.get("max_boxes") or MAX_BOXES)

    def layout(self, found):
        if "data.yaml" in found.skip:
            return "YOLO (class names from data.yaml)"
        return "COCO (annotations/instances_<split>.json)"

    def fit_prepare(self, images):
        """The letterbox scales an image's longer side to image_size: the median longer side,
        rounded to a multiple of 32 (the detector's largest stride) within 64-FIT_CAP. RGB
        always: torchvision's detectors take nothing else, and a grey image converts."""
        from stages.tasks.base import train_of

        sides = sorted(max(w, h) for _, w, h, _ in train_of(images))
        median = sides[(len(sides) - 1) // 2]
        size = min(FIT_CAP, max(64, 32 * round(median / 32)))
        return [("prepare.image_size", size,
                 f"median longer side {median} px (the letterbox scales it to image_size), "
                 f"rounded to a multiple of 32 within 64-{FIT_CAP}"),
                ("prepare.channels", 3, "RGB: every detector takes it (grey images convert)"),
                ("prepare.mean", "auto", "per channel, the prepared train split's"),
                ("prepare.std", "auto", "per channel, the prepared train split's")]

    def annotation_key(self, row):
        return row["boxes"]

    def check_columns(self, rows, ok, p, settings):
        """The columns, and the findings: the offending boxes {check: {path: [(where, why)]}}
        that reason() names."""
        sizes = [checks.size_matches(r) if g else None for r, g in zip(rows, ok, strict=True)]
        # a box normalised by a size the file does not have is judged by coco_size_mismatch
        # alone: its pixel sizes (box_too_small) would be wrong
        ok = [g and s is not False for g, s in zip(ok, sizes, strict=True)]
        found = checks.box_findings(rows, ok, p)
        cols = {"declared_size_match": sizes}
        for check in checks.BOX_CHECKS:
            bad = found.get(check, {})
            cols[f"boxes_{check}"] = [len(bad.get(r["path"], ())) if g else None
                                      for r, g in zip(rows, ok, strict=True)]
        cols["box_count"] = [len(checks.boxes_of(r)) if g else None
                             for r, g in zip(rows, ok, strict=True)]
        cols["label_file"] = [(0 if r["boxes"] == "" else 1) if g and p.require_labels else None
                              for r, g in zip(rows, ok, strict=True)]
        return cols, found

    def file_expectations(self, p):
        import great_expectations as gx

        e = gx.expectations
        out = [(check, e.ExpectColumnValuesToBeBetween(column=f"boxes_{check}", max_value=0))
               for check in checks.BOX_CHECKS]
        out.append(("no_labels", e.ExpectColumnValuesToBeBetween(column="box_count",
                                                                 min_value=1)))
        out.append(("unlabelled", e.ExpectColumnValuesToBeBetween(column="label_file",
                                                                  min_value=1)))
        out.append(("coco_size_mismatch", e.ExpectColumnValuesToBeInSet(
            column="declared_size_match", value_set=[True])))
        return out

    def reason(self, check, row, p, findings, settings):
        if check == "no_labels":
            return "no boxes: a background image" + (" (no label file)" if row["boxes"] == ""
                                                      else "")
        if check in self.annotation_errors:
            return row["error"]
        if check == "unlabelled":
            return "no label file (validate.require_labels is true)"
        if check == "coco_size_mismatch":
            return checks.size_reason(row)
        return "; ".join(f"{'line ' if isinstance(at, int) else ''}{at}: {why}"
                         for at, why in findings.get(check, {}).get(row["path"], []))

    def dataset_metrics(self, usable):
        """metrics/validation.json: `images_per_class` (images holding at least one box of
        each class; per_class counts boxes), `boxes` and `background_images` (no box)."""
        from collections import Counter

        images, boxes, background = Counter(), 0, 0
        for r in usable:
            labels = [b[1] for b in checks.boxes_of(r)
                      if b[1] != "!" and not str(b[1]).startswith("#")]
            images.update(set(labels))
            boxes += len(labels)
            background += not labels
        return {"images_per_class": dict(sorted(images.items())), "boxes": boxes,
                "background_images": background}

    def label_counts(self, rows):
        from collections import Counter

        return dict(Counter(b[1] for r in rows for b in checks.boxes_of(r)
                            if b[1] != "!" and not str(b[1]).startswith("#")))

    # ---- prepare

    def prepare_meta(self, splits):
        classes = sorted({b[1] for rows in splits.values() for r in rows
                          for b in checks.boxes_of(r)})
        most = max((len(checks.boxes_of(r)) for rows in splits.values() for r in rows),
                   default=0)
        return {"classes": classes, "max_boxes": max(1, most)}

    letterbox = True  # prepare.letterbox auto: boxes keep their shape
    encoder_takes_size = True

    def encoder(self, meta):
        import numpy as np

        from stages.lib.modality.imagecore import letterbox_geometry

        index = {c: i for i, c in enumerate(meta["classes"])}
        most = meta["max_boxes"]
        letterbox = bool(meta.get("letterbox"))

        def encode(row, pixels, size=None):
            """max_boxes x 5 [class, x1, y1, x2, y2] in the stored image's pixels; -1 pads.
            The normalised boxes go where the resize put the image: the whole input
            (squash), or the letterbox's scaled image (size: the upright (w, h) resized)."""
            h, w = pixels.shape[:2]
            left, top = 0, 0
            if letterbox and size is not None:
                left, top, w, h = letterbox_geometry(size, w)
            out = np.full((most, 5), -1, dtype=np.float32)
            for k, (_, label, xc, yc, bw, bh) in enumerate(checks.boxes_of(row)):
                out[k] = (index[label], left + (xc - bw / 2) * w, top + (yc - bh / 2) * h,
                          left + (xc + bw / 2) * w, top + (yc + bh / 2) * h)
            return out

        return encode

    # ---- train

    def build_model(self, name, meta):
        from stages.tasks.detection.model import build_model

        return build_model(name, len(meta["classes"]), meta["channels"], meta["image_size"])

    def head(self, model):
        """The model says it (model.py, torchvision_detectors.py: head_module)."""
        return model.head_module

    def lora_targets(self, model):
        """The model says it: backbone and neck (lora_patterns)."""
        return list(model.lora_patterns)

    def augment(self, x, y, p, seed):
        from stages.tasks.detection.augment import augment

        return augment(x, y, p, seed)

    def augment_batch(self, x, y, p, seeds):
        from stages.tasks.detection.augment import augment_batch

        return augment_batch(x, y, p, seeds)

    def loss(self, outputs, targets, p):
        from stages.tasks.detection.model import loss

        return loss(outputs, targets, outputs.shape[1] - 4)

    def val_sums(self, outputs, targets):
        """Eval-mode outputs are decoded detections: the metric is the batch's mAP50 (train
        validates in one batch of up to 512 images), the "loss" 1 - mAP50."""
        from stages.tasks.detection.metrics import truths
        from stages.tasks.detection.boxes import ap_at, detections

        out = outputs.float().cpu().numpy()
        dets = [detections(o, MIN_SCORE) for o in out]
        classes = int(max([int(d[:, 5].max()) + 1 for d in dets if len(d)] +
                          [int(targets[..., 0].max().item()) + 1, 1]))
        ap = ap_at(dets, truths(targets.cpu().numpy()), 0.5, classes)
        n = len(out)
        return (1 - ap) * n, ap * n

    # ---- evaluate

    def evaluate(self, outputs, targets, paths, images, meta, p):
        from stages.tasks.detection.metrics import evaluate

        return evaluate(outputs, targets, paths, images, meta["classes"], p)

    # ---- export

    def parity(self, reference, candidate, params):
        """Per image: (max |difference| of the matched detections' boxes and scores, whether
        they agree). Every detection at or above export.score_threshold (null:
        evaluate.score_threshold) on either side must
        match one on the other side (IoU >= 0.99 or every corner within CORNER_TOL pixels, as
        a degenerate box has no IoU; same class, score within SCORE_TOL; the
        other side's list is taken down to threshold - SCORE_TOL, so a score that rounds
        across the threshold does not fail). An unmatched detection is an infinite
        difference. The same decoding (threshold, NMS) as evaluate, predict and serve."""
        import numpy as np

        from stages.tasks.detection.boxes import detections, match

        t = export_threshold(params)
        loose = max(0.0, t - SCORE_TOL)
        diff = np.zeros(len(reference))
        agree = np.ones(len(reference), dtype=bool)
        for k, (a, b) in enumerate(zip(reference, candidate, strict=True)):
            worst = 0.0
            for strict, other in ((detections(a, t), detections(b, loose)),
                                  (detections(b, t), detections(a, loose))):
                pairs, _ = match(strict, other, 0.99, CORNER_TOL)
                if len(pairs) < len(strict):
                    agree[k], worst = False, np.inf
                    break
                if pairs:
                    i, j = np.array(pairs).T
                    gap = np.abs(strict[i, :5].astype(np.float64) - other[j, :5])
                    worst = max(worst, float(gap.max()))
                    agree[k] &= bool(gap[:, 4].max() <= SCORE_TOL)
            diff[k] = worst
        return diff, agree

    decode_metadata = ("score_threshold",)

    def export_metadata(self, params):
        """The decoding a consumer of the ONNX graph applies to its N x K x 6 rows: keep
        scores >= score_threshold (export.score_threshold, or evaluate's when null; also
        predict's and serve's default), then class-wise NMS at nms_iou. (The letterbox
        and input size are the model's preprocessing keys, written beside these.)"""
        from stages.tasks.detection.boxes import NMS_IOU

        return {"score_threshold": export_threshold(params), "nms_iou": NMS_IOU}

    def describe(self, outputs_row):
        from stages.tasks.detection.boxes import detections
        from stages.tasks.detection.outputs import DEFAULT_SCORE

        found = detections(outputs_row, DEFAULT_SCORE)
        return (f"{len(found)} detections at score >= {DEFAULT_SCORE}"
                + (f" (best {found[0, 4]:.3f})" if len(found) else ""))

    # ---- predict and serve

    prediction_fields = {"boxes": "array"}

    def empty_prediction(self):
        return {"boxes": []}

    def decode(self, outputs, meta, k):
        from stages.tasks.detection.outputs import decode

        return decode(outputs, meta)


def export_threshold(params: dict) -> float:
    """export.score_threshold, or evaluate.score_threshold when it is null (params: {section:
    typed params})."""
    own = params["export"].score_threshold
    return params["evaluate"].score_threshold if own is None else own


TASK = Detection()
