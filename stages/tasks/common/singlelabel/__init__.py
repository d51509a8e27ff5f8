"""The single-label family (classification, audio): one class per input. What both answer the
same way lives here: the label column and its checks (checks.py), the class list in meta, the
encoder, cross-entropy, the metrics and the files that explain them (metrics.py), export's
top-1 agreement, and top-k predictions (outputs.py). A task adds its input, its layouts, its
models and its sample."""
from stages.tasks.base import Task
from stages.tasks.common.singlelabel import checks


class SingleLabel(Task):
    annotation_fields = ("label",)
    checks = checks.CHECKS
    annotation_errors = ("empty_folder", "missing", "unlabelled")
    meta_keys = ("classes",)
    target_dtype = "int64"
    val_metric = "acc"
    agreement_name = "top1_agreement"
    headline_metric = "accuracy"
    secondary_metrics = ("balanced_accuracy", "f1_macro")
    task_keys = ("sample.per_class", "train.label_smoothing", "evaluate.calibration_bins")
    # evaluate's words for one input ("images": its summary line and the bad cases' sheet),
    # what its summary calls accuracy, and the sheet's cell (width, height) in inches
    items = "images"
    accuracy_word = "accuracy"
    sheet_cell = (2.4, 2.6)

    def annotation_key(self, row):
        return row["label"]

    def check_columns(self, rows, ok, p, settings):
        return checks.check_columns(rows, ok, p), None

    def file_expectations(self, p):
        return checks.file_expectations(p)

    def reason(self, check, row, p, findings, settings):
        if check == "unexpected_class":  # its one check of its own columns
            return f"unexpected class {row['label']} (validate.classes)"
        return row["error"] or check  # an annotation error (annotation_errors): ingest's message

    def dataset_findings(self, usable, p, offenders):
        return checks.dataset_findings(usable, p, offenders)

    def label_counts(self, rows):
        return checks.label_counts(rows)

    def prepare_meta(self, splits):
        return {"classes": sorted({r["label"] for rows in splits.values() for r in rows})}

    def encoder(self, meta):
        index = {c: i for i, c in enumerate(meta["classes"])}
        return lambda row, pixels: index[row["label"]]

    def loss(self, outputs, targets, p):
        import torch.nn.functional as F

        return F.cross_entropy(outputs, targets, label_smoothing=p.label_smoothing)

    def val_sums(self, outputs, targets):
        import torch.nn.functional as F

        outputs = outputs.float()
        return (F.cross_entropy(outputs, targets, reduction="sum").item(),
                (outputs.argmax(1) == targets).sum().item())

    def evaluate(self, outputs, targets, paths, images, meta, p):
        from stages.tasks.common.singlelabel.metrics import evaluate

        return evaluate(outputs, targets, paths, images, meta["classes"], p,
                        self.modality.thumbnail, self.sheet_cell, self.items, self.accuracy_word)

    def agree(self, reference, candidate):
        return candidate.argmax(1) == reference.argmax(1)

    def describe(self, outputs_row):
        return f"top-1 {int(outputs_row.argmax())}"

    prediction_fields = {"label": "string", "score": "number", "topk": "array"}

    def empty_prediction(self):
        return {"label": "", "score": None, "topk": []}

    def decode(self, outputs, meta, k):
        from stages.tasks.common.singlelabel.outputs import decode

        return decode(outputs, meta["classes"], k)

    def subset_group(self, values):
        return f"{values.get('split', '')}/{values.get('label', '')}"  # per class (and split)
