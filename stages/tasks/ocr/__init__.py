"""Text recognition (OCR): cropped line images with transcripts in (rec_gt.txt, JSONL or
x.png + x.txt pairs), a small CRNN trained with CTC, CER on the fixed test split, text out."""
from stages.tasks.common.ctctext import CtcText
from stages.tasks.ocr import annotations, checks

FIT_HEIGHT = 32  # tools.init's line height for one's own data (the sample's)


class OCR(CtcText):
    name = "ocr"
    checks = checks.CHECKS
    dynamic_width = 4  # the CRNN's stride (checks.STRIDE): T = width / 4 frames, any width

    def pad_outputs(self, outputs, frames):
        """Blank frames (probability 1: logit 0 for the blank, -inf for every character): the
        greedy text is the bucket width's; only an empty line's confidence counts them."""
        import numpy as np

        pad = np.full((len(outputs), frames - outputs.shape[1], outputs.shape[2]), -np.inf,
                      dtype=outputs.dtype)
        pad[..., 0] = 0.0
        return np.concatenate([outputs, pad], axis=1)

    secondary_metrics = ("wer", "line_accuracy")
    # what a project on one's own data starts from (tools.init), and the built-in sample too
    # (but the crop of the line box and the paper's gradient and specks: lines of any
    # tightness and paper for one's own data, docs/ocr.md).
    # near_dup_distance -1: a perceptual hash of a wide line says little of its text, so
    # different lines would be grouped as lookalikes
    recipe = {
        "train.model": "crnn", "train.epochs": 12, "train.batch_size": 32, "train.lr": 0.003,
        "train.warmup_epochs": 1, "train.grad_clip": 5.0,
        "train.aug_rotate": 1.5, "train.aug_stretch": 0.15, "train.aug_blur": 0.3,
        "train.aug_jitter": 0.1, "train.aug_crop_line": 0.5,
        "train.aug_gradient": 0.4, "train.aug_specks": 0.008,
        "validate.near_dup_distance": -1,
    }
    # The params the built-in sample needs besides `task: ocr` and `data.source`.
    sample_params = {
        "sample.lines": 2400,
        "prepare.height": 32, "prepare.width": 192, **recipe,
        "train.aug_crop_line": 0.0,  # the sample's lines keep the crop they were drawn with
        "train.aug_gradient": 0.0, "train.aug_specks": 0.0,  # and their paper (its bytes)
    }
    layouts = ("rec_gt.txt (path<TAB>text per line), a *.jsonl list ({\"path\", \"text\"} "
               "per line) or x.png beside x.txt")
    revisit = (
        ("validate.charset", "\"\" accepts any character: list yours, so a stray one stops "
                             "the gate"),
        ("prepare.width", "every line is padded (or squeezed) to it: the widest line sets it; "
                          "prepare.width_buckets batches narrow lines narrower"),
        ("train.epochs", "12 suits the 2,400 sample lines; fewer lines need more epochs"),
        ("export.width_buckets", "widths predict and serve run lines at; [] = the trained "
                                 "width only"),
    )

    models = ("crnn", "crnn_large")  # stages/tasks/ocr/model.py SIZES
    task_keys = ("sample.lines", "validate.charset", "validate.max_aspect", "train.aug_stretch",
                 "train.aug_blur", "train.aug_stroke", "train.aug_shear", "train.aug_aspect",
                 "train.aug_elastic", "train.aug_texture", "train.aug_downscale",
                 "train.aug_jpeg", "train.aug_crop_line", "train.aug_gradient",
                 "train.aug_specks", "prepare.height", "prepare.width",
                 "prepare.width_buckets",
                 "export.width_buckets")

    def param_problems(self, params, others):
        """Besides the defaults: text lines (prepare.height, a multiple of 8 for the CRNN's
        pooling, and prepare.width), not square images."""
        out = super().param_problems(params, others)
        height = params["prepare"].height
        if not height or height % 8:
            out.append(f"prepare.height: {height}, but ocr reads text lines: set a height "
                       f"that is a multiple of 8 (the sample's: 32) and prepare.width "
                       f"(the sample's: 192)")
        return out

    def check_settings(self, params):
        """The CTC length rule's geometry: (prepare.height, prepare.width); the sample's
        (32, 192) when prepare.height is 0."""
        prepare = params["prepare"]
        return {"geometry": (prepare.height, prepare.width) if prepare.height else (32, 192)}

    def layout(self, found):
        lists = sorted(found.skip - {r for r in found.skip if r.endswith(".txt")})
        if annotations.LIST in found.skip:
            return f"{annotations.LIST} line list (path<TAB>text)"
        return f"JSONL line list ({lists[0]})" if lists else "image + .txt pairs"

    def fit_prepare(self, images):
        """Lines at FIT_HEIGHT, padded to the widest line's width there (every split's:
        prepare fits them all), rounded up to a multiple of 32."""
        from stages.tasks.base import fit_channels

        widest = max(round(w * FIT_HEIGHT / h) for _, w, h, _ in images)
        width = max(FIT_HEIGHT, 32 * -(-widest // 32))
        return [("prepare.height", FIT_HEIGHT, "the CRNN's line height (a multiple of 8)"),
                ("prepare.width", width,
                 f"the widest line is {widest} px at height {FIT_HEIGHT}, rounded up to a "
                 f"multiple of 32"),
                fit_channels(images),
                ("prepare.mean", "auto", "per channel, the prepared train split's"),
                ("prepare.std", "auto", "per channel, the prepared train split's")]

    def sample(self, p):
        from stages.tasks.ocr.sample import LINES, text_lines

        return text_lines(p.lines or LINES)

    def read_annotations(self, source, listing, settings):
        return annotations.read_annotations(source, listing)

    def check_columns(self, rows, ok, p, settings):
        return checks.check_columns(rows, ok, p, settings["geometry"]), None

    def file_expectations(self, p):
        return checks.file_expectations(p)

    def reason(self, check, row, p, findings, settings):
        return checks.reason(check, row, p, settings["geometry"])

    def build_model(self, name, meta):
        from stages.lib.modality.imagecore import input_hw
        from stages.tasks.ocr.model import build_model

        height, _ = input_hw(meta["image_size"])
        return build_model(name, 1 + len(meta["charset"]), meta["channels"], height)

    def lora_targets(self, model):
        return ["features", "encoder"]  # the conv stack and the 1-D encoder (undilated convs)

    def augment(self, x, y, p, seed):
        from stages.tasks.ocr.augment import augment

        return augment(x, p, seed), y

    def augment_batch(self, x, y, p, seeds):
        from stages.tasks.ocr.augment import augment_batch

        return augment_batch(x, p, seeds), y

    def evaluate(self, outputs, targets, paths, images, meta, p):
        from stages.tasks.common.ctc import scores
        from stages.tasks.ocr.groups import group_metrics, summary
        from stages.tasks.ocr.metrics import evaluate

        metrics, files, line = evaluate(outputs, paths, images, meta, p)
        more, more_files = group_metrics(files["predictions.csv"], scores)
        return {**metrics, **more}, {**files, **more_files}, line + summary(more)


TASK = OCR()
