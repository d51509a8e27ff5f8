"""Image classification: one class per image (ImageFolder or labels.csv), cross-entropy,
accuracy and per-class scores, top-k predictions."""
from stages.tasks.base import Task
from stages.tasks.classification import annotations, checks


class Classification(Task):
    name = "classification"
    annotation_fields = ("label",)
    checks = checks.CHECKS
    annotation_errors = ("empty_folder", "missing", "unlabelled")
    meta_keys = ("classes",)
    target_dtype = "int64"
    letterbox = False  # prepare.letterbox may be set: a class does not move with pixels
    val_metric = "acc"
    agreement_name = "top1_agreement"
    headline_metric = "accuracy"
    secondary_metrics = ("balanced_accuracy", "f1_macro")
    layouts = ("an ImageFolder tree <source>/<class>/<image> (or <source>/<split>/<class>/"
               "<image>, split train, val or test), or <source>/labels.csv with path,label")
    revisit = (
        ("train.epochs", "15, with batch_size 32 and lr 0.003, suits the 1,797 digits; more "
                         "images need fewer epochs, fewer images more"),
        ("train.model", "small_cnn; resnet18 (or train.init_from with pretrained weights) "
                        "for photos larger than 64 px"),
        ("train.aug_hflip", "off (digits are not symmetric); 0.5 when a mirrored image is "
                            "still its class, as most photos are"),
        ("validate.classes", "[] accepts any folder as a class: list yours, so a typo'd "
                             "folder stops the gate"),
        ("validate.on_error", "fail stops on the first bad file; quarantine trains without "
                              "them and lists them"),
    )
    models = ("small_cnn",)  # or a torchvision classifier by name (model_problem)
    task_keys = ("sample.per_class", "train.label_smoothing", "evaluate.calibration_bins")

    def model_problem(self, name, others):
        """small_cnn or any torchvision classifier: only another task's model is refused
        here (an unknown name fails in train, which asks torchvision without slowing down
        every stage's start)."""
        owner = next((t.name for t in others if name in t.models), "")
        if name in self.models or not owner:
            return ""
        return (f"train.model: {name!r} is a {owner} model; classification builds small_cnn "
                f"(its default) or a torchvision classifier such as resnet18")

    def sample(self, p):
        from stages.tasks.classification.sample import digit_images

        return digit_images(p.per_class)

    def read_annotations(self, source, listing, settings):
        return annotations.read_annotations(source, listing)

    def layout(self, found):
        return annotations.layout(found)

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

    def build_model(self, name, meta):
        from stages.tasks.classification.model import build_model

        return build_model(name, len(meta["classes"]), meta["channels"])

    def loss(self, outputs, targets, p):
        import torch.nn.functional as F

        return F.cross_entropy(outputs, targets, label_smoothing=p.label_smoothing)

    def val_sums(self, outputs, targets):
        import torch.nn.functional as F

        outputs = outputs.float()
        return (F.cross_entropy(outputs, targets, reduction="sum").item(),
                (outputs.argmax(1) == targets).sum().item())

    def evaluate(self, outputs, targets, paths, images, meta, p):
        from stages.tasks.classification.metrics import evaluate

        return evaluate(outputs, targets, paths, images, meta["classes"], p)

    def agree(self, reference, candidate):
        return candidate.argmax(1) == reference.argmax(1)

    def describe(self, outputs_row):
        return f"top-1 {int(outputs_row.argmax())}"

    prediction_fields = {"label": "string", "score": "number", "topk": "array"}

    def empty_prediction(self):
        return {"label": "", "score": None, "topk": []}

    def decode(self, outputs, meta, k):
        from stages.tasks.classification.outputs import decode

        return decode(outputs, meta["classes"], k)

    def subset_group(self, values):
        return f"{values.get('split', '')}/{values.get('label', '')}"  # per class (and split)

    def subset_annotations(self, source, dest, found, chosen):
        annotations.write_subset_labels(source, dest, found, chosen)

    def headline(self, facts):
        from stages.tasks.classification import report

        return report.headline(facts)

    def report_sections(self, facts):
        from stages.tasks.classification import report

        return report.sections(facts)


TASK = Classification()
