"""Semantic segmentation: a class per pixel (images + masks, or nnU-Net 2D), cross-entropy with
an ignore value, mIoU and Dice per class, masks out of predict and serve."""
from stages.tasks.base import Task
from stages.tasks.segmentation import annotations
from stages.tasks.segmentation import checks as gate

IGNORE = 255  # the stored targets' ignore value, whatever the dataset's (prepare maps it)


class Segmentation(Task):
    name = "segmentation"
    annotation_fields = annotations.FIELDS
    checks = gate.CHECKS
    annotation_errors = gate.ANNOTATION_ERRORS
    meta_keys = ("classes", "ignore_index")
    target_dtype = "uint8"
    val_metric = "miou"  # per validation image, averaged over the images
    agreement_name = "pixel_agreement"  # share of images with >= 99.9% of argmax pixels equal
    headline_metric = "miou_foreground"
    secondary_metrics = ("miou",)  # Dice follows IoU
    # what a project on one's own data starts from (tools.init), and the built-in sample too
    recipe = {
        "validate.min_side": 8,
        "train.model": "unet", "train.epochs": 8, "train.batch_size": 16, "train.lr": 0.003,
        "train.aug_hflip": 0.5,
        "evaluate.batch_size": 32, "evaluate.bad_cases": 8,
        "export.parity_batch": 16,
    }
    # What the built-in sample needs besides `task: segmentation` and `data.source`.
    sample_params = {
        "sample.images": 600,
        "prepare.image_size": 128, "prepare.channels": 3,
        "prepare.mean": [0.5, 0.5, 0.5], "prepare.std": [0.25, 0.25, 0.25], **recipe,
    }
    layouts = ("images + masks (images/<name>.<ext> with masks/<name>.png of class indices, "
               "optional classes.yaml; images/<split>/ and masks/<split>/ for a split of its "
               "own) or nnU-Net 2D (dataset.json, imagesTr/CASE_0000.png, labelsTr/CASE.png)")
    revisit = (
        ("prepare.image_size", "masks are resized with the images: fine structures need more "
                               "pixels than the fitted size (at most 128 unless set)"),
        ("train.epochs", "8 suits the 600-image sample; fewer images need more epochs"),
        ("train.aug_hflip", "0.5: off when left and right are different classes"),
        ("validate.on_error", "fail stops on any bad mask; quarantine trains without them"),
    )

    rgb_models = ("lraspp_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large")  # TORCHVISION
    models = ("unet", "small_unet", *rgb_models)  # model.py's (a test keeps them equal)
    task_keys = ("sample.images",)

    def param_problems(self, params, others):
        """Besides the defaults: sides a multiple of 8 (the U-Net pools three times), and RGB
        for torchvision's segmenters (the U-Net takes grey too)."""
        prepare, model = params["prepare"], params["train"].model
        out = super().param_problems(params, others)
        if isinstance(prepare.image_size, int) and prepare.image_size % 8:
            out.append(f"prepare.image_size: {prepare.image_size} is not a multiple of 8, "
                       f"which the segmenters need (or auto)")
        if model in self.rgb_models and prepare.channels == 1:
            out.append(f"prepare.channels: 1, but train.model {model} takes RGB: set 3 "
                       f"(or auto)")
        return out

    def sample(self, p):
        from stages.tasks.segmentation.sample import sample_files

        return sample_files(p.images)

    def read_settings(self, params):
        return {"max_pixels": params["validate"].max_pixels}  # masks larger are never decoded

    def read_annotations(self, source, listing, settings):
        return annotations.read_annotations(source, listing,
                                            settings.get("max_pixels", annotations.MAX_PIXELS))

    def layout(self, found):
        if "dataset.json" in found.skip:
            return "nnU-Net 2D (dataset.json, imagesTr/ + labelsTr/, imagesTs/ + labelsTs/)"
        return "images + masks (" + ("classes from classes.yaml" if "classes.yaml" in found.skip
                                     else "classes are the mask values") + ")"

    def annotation_key(self, row):
        return row["mask_sha256"]

    def check_columns(self, rows, ok, p, settings):
        return gate.check_columns(rows, ok, p), None

    def file_expectations(self, p):
        return gate.file_expectations(p)

    def reason(self, check, row, p, findings, settings):
        return gate.reason(check, row)

    def dataset_findings(self, usable, p, offenders):
        return gate.dataset_findings(usable, p, offenders)

    def dataset_metrics(self, usable):
        return gate.dataset_metrics(usable)

    def label_counts(self, rows):
        return gate.label_counts(rows)

    def prepare_meta(self, splits):
        rows = [r for part in splits.values() for r in part]
        _, ignore = gate.label_set(rows[0]) if rows else ({}, IGNORE)
        return {"classes": gate.class_names(rows), "ignore_index": ignore}

    def encoder(self, meta):
        from pathlib import Path

        import numpy as np
        from PIL import Image

        source = Path(meta["source"])
        k, ignore = len(meta["classes"]), meta["ignore_index"]

        def encode(row, pixels):
            with Image.open(source / row["mask"]) as img:
                mask = img if img.mode == "L" else Image.frombytes("L", img.size, img.tobytes())
                mask = np.asarray(mask.resize((pixels.shape[1], pixels.shape[0]),
                                              Image.Resampling.NEAREST), dtype=np.uint8)
            return np.where((mask == ignore) | (mask >= k), IGNORE, mask).astype(np.uint8)

        return encode

    def build_model(self, name, meta):
        from stages.tasks.segmentation.model import build_model

        return build_model(name, len(meta["classes"]), meta["channels"])

    def head(self, model):
        from stages.tasks.segmentation.model import head_name

        return head_name(model)

    def lora_targets(self, model):
        from stages.tasks.segmentation.model import lora_targets

        return lora_targets(model)

    def augment(self, x, y, p, seed):
        from stages.tasks.segmentation.transforms import augment

        return augment(x, y, p, seed)

    def augment_batch(self, x, y, p, seeds):
        from stages.tasks.segmentation.transforms import augment_batch

        return augment_batch(x, y, p, seeds)

    def loss(self, outputs, targets, p):
        from stages.tasks.segmentation.transforms import loss

        return loss(outputs, targets)

    def val_sums(self, outputs, targets):
        from stages.tasks.segmentation.transforms import val_sums

        return val_sums(outputs, targets)

    def evaluate(self, outputs, targets, paths, images, meta, p):
        from stages.tasks.segmentation.metrics import evaluate

        return evaluate(outputs, targets, paths, images, meta["classes"], p)

    def agree(self, reference, candidate):
        n = len(reference)
        same = (reference.argmax(1) == candidate.argmax(1)).reshape(n, -1)
        return same.mean(1) >= 0.999

    def describe(self, outputs_row):
        import numpy as np

        counts = np.bincount(outputs_row.argmax(0).ravel(), minlength=outputs_row.shape[0])
        return "argmax pixels per class " + "/".join(map(str, counts.tolist()))

    prediction_fields = {"size": "array", "areas": "object", "rle": "object", "mask_png": "string"}

    def empty_prediction(self):
        return {"size": [], "areas": {}, "rle": {}, "mask_png": ""}

    def decode(self, outputs, meta, k):
        from stages.tasks.segmentation.outputs import decode

        return decode(outputs, meta["classes"])

    def write_prediction(self, row, out):
        from stages.tasks.segmentation.outputs import write_prediction

        return write_prediction(row, out, self.empty_prediction())


TASK = Segmentation()
