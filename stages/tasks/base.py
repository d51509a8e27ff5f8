"""The Task protocol: everything in the pipeline that is shaped by the label type.

The stages are the same for every task (sample ingest validate split prepare train evaluate
export report, plus the tools predict and serve); each looks the task up once
(`stages.tasks.current()`) and calls it. What is task-agnostic stays in stages/lib/: inventory,
hashing, decode checks, groups, split, checkpoints, resume, DDP, provenance.

A task subclasses `Task`, overrides what differs from the defaults below, and is instantiated as
`TASK` in `stages/tasks/<name>/__init__.py`. Keep torch and other heavy imports inside methods:
stages look the task up after parsing their options, but `--help` must stay instant.

A hook gets typed params (stages/lib/params.py): its section's (`p`), or every section's as
{section: params} (`params`), never a params file to read. The one instance is shared by every
caller: what one hook finds for another is returned and passed back (check_columns' findings
to reason; read_settings and check_settings, what the annotations and the checks need of other
stages' params), never kept on it. What a
model does (a forward that takes the targets, a fixed export batch) its model says, not the
task: stages/lib/model/models.py reads it.

The order of the sections follows the pipeline. A task's part of the run report (its headline
and sections) is not here: it is stages/report/tasks/<name>.py, outside the task's code, so
that an edit to the report never reruns training. What several tasks share is a family of
stages/tasks/common/ (single-label, CTC text), never another task's package.
"""
from dataclasses import dataclass, field
from pathlib import Path

from stages.lib.checks import BLOCKING, DATASET, WARNING  # noqa: F401 (the tasks' import)


@dataclass
class Annotations:
    """What a task read from the dataset's annotations, for ingest.

    values: {path: {field: value}} for the task's `annotation_fields` plus `group`,
      `timestamp` and `split` (the dataset's own train/val/test, "" when it has none), for
      every inventoried entry and every entry of `extra`.
    errors: {path: (error_kind, message)}: an annotation problem of that entry (unlabelled, a
      bad label file, an empty class folder...). It shows in the manifest when decoding the file
      found nothing wrong; every error_kind must be one of the task's blocking checks.
    skip: files under the source that are annotations, not images (labels.csv, YOLO .txt).
    extra: paths that get a manifest row without a file (listed in annotations, not found).
    warnings: [(name, message)] about the annotations as a whole that block nothing (detection:
      `unused_classes`); ingest prints each as `ingest: warning: <name>: <message>`.
    """
    values: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    skip: set = field(default_factory=set)
    extra: list = field(default_factory=list)
    warnings: list = field(default_factory=list)


class Task:
    name = ""
    # the kind of input the task reads: a module of stages/lib/modality/ (Task.modality)
    modality_name = "image"
    annotation_fields: tuple = ()  # manifest and split columns after `path`
    checks: dict = {}  # {check: (kind, description)}: the task's own validate checks
    annotation_errors: tuple = ()  # error kinds read_annotations may set (blocking checks)
    meta_keys: tuple = ()  # keys of data/processed/meta.json the task owns; models carry them
    # meta_keys a model made before the key existed may lack (predict and serve read it as
    # absent: speech's lexicon, absent = decode freely)
    optional_meta_keys: tuple = ()
    target_dtype = "int64"  # numpy dtype of the stored targets (data/processed/<split>/targets-*)
    val_metric = "metric"  # train logs val/<val_metric> and metrics/train.json val_<val_metric>
    val_higher_is_better = True
    output_names = ("logits",)  # the ONNX graph's outputs
    # 0: the model's input width is fixed (image_size). n > 0: the model takes any width that is a
    # multiple of n (ocr's CRNN: 4, one output frame per 4 columns); its ONNX graph gets a
    # dynamic width axis, and export.width_buckets may list the widths predict and serve use
    dynamic_width = 0

    def pad_outputs(self, outputs, frames: int):
        """A dynamic-width model's outputs (numpy N x T x ...) of lines run at a narrower width
        bucket, extended to `frames` along the width axis with outputs that decode to nothing,
        so evaluate can stack every bucket's lines in one array (prepare.width_buckets)."""
        raise NotImplementedError(f"task {self.name} has no width buckets")
    agreement_name = "agreement"  # metrics/export.json key: share of items whose decision agrees
    headline_metric = ""  # the metrics/eval.json key a reader looks at first
    # the metrics/eval.json keys compared beside the headline: with it, the eval part of
    # metrics/summary.json, the one DVC metric (the columns of `dvc exp show`)
    secondary_metrics: tuple = ()
    # {dotted params key: value} the built-in sample needs besides `task` and `data.source`
    sample_params: dict = {}

    @property
    def modality(self):
        """The task's modality (stages/lib/modality/): what ingest, validate, prepare, train,
        predict and serve ask about an input file, its decode and its normalisation."""
        from stages.lib.modality import get

        return get(self.modality_name)

    def read_settings(self, params: dict) -> dict:
        """What read_annotations needs of the params ({section: typed params}) besides the files
        (detection: validate.max_boxes, segmentation: validate.max_pixels): ingest, tools.init
        and tools.synth_ocr each pass it, so every reader sees what ingest sees. Default: none.
        """
        return {}

    def check_settings(self, params: dict) -> dict:
        """What the task's checks (check_columns, reason) need of other stages' params (ocr:
        the CTC length rule on prepare.height/width; audio and speech: prepare.audio's
        sample rate): validate passes it to both. Default: none."""
        return {}

    @property
    def headline_higher_is_better(self) -> bool:
        """The headline's direction (export's metric-drop gate); a task whose headline is not
        its val_metric and points the other way overrides it (a class attribute will do)."""
        return self.val_higher_is_better

    # ---- init: a project on one's own data (tools/init.py)

    # {dotted params key: value} a project on its own data starts from, beyond the defaults
    # (the model, epochs, augmentations...), besides data.source, split.by and the prepare
    # settings fit_prepare chooses from the data. sample_params adds what the built-in sample
    # needs on top of it.
    recipe: dict = {}
    # the dataset layouts read_annotations reads, in words: init's error for a folder it
    # cannot read names them
    layouts = "image files"
    # [(params key, why)]: what to look at after a first run on one's own data (init prints it)
    revisit: tuple = ()

    def layout(self, found: Annotations) -> str:
        """The layout read_annotations recognised, in words ("YOLO (names from data.yaml)")."""
        return self.layouts

    def data_summary(self, rows: list) -> str:
        """What init says of the annotations of the usable rows ({path, **values}): by default
        the classes label_counts finds."""
        classes = sorted(self.label_counts(rows), key=str)
        shown = ", ".join(map(str, classes[:8])) + (" ..." if len(classes) > 8 else "")
        return f"{len(classes)} classes ({shown})"

    def fit_prepare(self, facts: list) -> list:
        """[(dotted prepare key, value, why)]: prepare's settings for one's own data, from the
        header facts of its files (the modality's header: images (split, width, height, grey),
        upright sizes; split "" when the data has none). Default, square images: image_size
        and channels as prepare's auto chooses them (stages/lib/modality/imagefit.py: sizes
        from train), mean/std auto (train's)."""
        images = facts
        from stages.lib.modality.imagefit import (AUTO_SIZE_CAP, AUTO_SIZE_MIN, SIZE_MULTIPLE,
                                                  auto_size)

        sides = sorted(min(w, h) for _, w, h, _ in train_of(images))
        return [
            ("prepare.image_size", auto_size(sides),
             f"median shorter side {sides[(len(sides) - 1) // 2]} px, rounded to a multiple of "
             f"{SIZE_MULTIPLE} within {AUTO_SIZE_MIN}-{AUTO_SIZE_CAP}"),
            fit_channels(images),
            ("prepare.mean", "auto", "per channel, the prepared train split's"),
            ("prepare.std", "auto", "per channel, the prepared train split's"),
        ]

    # ---- params: checked before any stage works (stages.tasks.current)

    # train.model names the task builds, its default first; () = not declared (not checked)
    models: tuple = ()
    # dotted params keys that only some tasks read, each task listing those it reads. Set away
    # from its default under a task that does not list it, such a key is a leftover of
    # another task (train.aug_stretch under classification)
    task_keys: tuple = ()
    # prepare.channels values that fit the task's data ("auto": chosen from the data); () =
    # its modality's (CHANNELS: images 1, 3 or auto; sounds 1 or auto)
    channels: tuple = ()
    # image tasks: the smallest prepare.image_size (pixels per side) the task's models take
    min_image_size = 1

    def param_problems(self, params: dict, others: list) -> list[str]:
        """Why the typed params ({section: params}, each already valid on its own) do not fit
        this task: one line per bad key, naming the key, its value and what the task takes;
        [] when they fit. others: the other tasks, whose `models` and `task_keys` tell a
        leftover from another task. Every stage runs this first, so a half-switched
        params.yaml stops before any stage works. Default: train.model among `models`,
        prepare.channels among `channels` (with mean and std to match), prepare.image_size at
        least `min_image_size`, prepare.letterbox only where the task has one, and no other
        task's key set. A task with further needs adds to this list."""
        prepare = params["prepare"]
        out = [self.model_problem(params["train"].model, others)]
        channels = self.channels or self.modality.CHANNELS
        if prepare.channels not in channels:
            wanted = [c for c in channels if c != "auto"]
            rgb = " (RGB) or auto (grey only when every image is)" if 3 in wanted else " or auto"
            out.append(f"prepare.channels: {prepare.channels}, but {self.name} takes "
                       f"{' or '.join(map(str, wanted))}{rgb}")
            for key in ("mean", "std"):
                value = getattr(prepare, key)
                if isinstance(value, list) and len(wanted) == 1 and len(value) != wanted[0]:
                    out.append(f"prepare.{key}: {value} has {len(value)} value(s); "
                               f"{wanted[0]} channels need {wanted[0]} (or auto)")
        if isinstance(prepare.image_size, int) and prepare.image_size < self.min_image_size:
            out.append(f"prepare.image_size: {prepare.image_size} px is too small for "
                       f"{self.name}: at least {self.min_image_size} (or auto)")
        if prepare.letterbox is True and self.letterbox is None:
            out.append(f"prepare.letterbox: true, but {self.name}'s targets do not follow a "
                       f"letterbox: set auto or false")
        return ([line for line in out if line] + self.leftover_keys(params, others)
                + self.other_modality_keys(params, others))

    def model_problem(self, name: str, others: list) -> str:
        """Why train.model does not fit ("" when it does): a name outside `models`, said to be
        another task's when it is."""
        if not self.models or name in self.models:
            return ""
        owner = next((t.name for t in others if name in t.models), "")
        what = (f"{'an' if owner[0] in 'aeiou' else 'a'} {owner} model" if owner
                else f"not a model {self.name} builds")
        builds = self.models[0] if len(self.models) == 1 else (
            f"{', '.join(self.models)} ({self.models[0]} is its default)")
        return f"train.model: {name!r} is {what}; {self.name} builds {builds}"

    def other_modality_keys(self, params: dict, others: list) -> list[str]:
        """Another modality's own keys (its ONLY_KEYS: an image task's prepare.image_size or
        prepare.height under an audio task) set away from their defaults; those another task
        lists among its task_keys are leftover_keys' to name."""
        from stages.lib.modality import MODALITIES, get

        listed = {key for other in others for key in other.task_keys}
        out = []
        for name in sorted(MODALITIES):
            if name == self.modality_name:
                continue
            for key in get(name).ONLY_KEYS:
                section, field = key.split(".")
                value = getattr(params[section], field)
                default = getattr(type(params[section])(), field)
                if key not in listed and value != default:
                    out.append(f"{key}: {value!r} is read by {name} tasks only; {self.name} "
                               f"ignores it: remove it (default {default!r})")
        return out

    def leftover_keys(self, params: dict, others: list) -> list[str]:
        """Another task's task_keys this task does not read, set away from their defaults."""
        owners = {}
        for other in others:
            for key in other.task_keys:
                if key not in self.task_keys:
                    owners.setdefault(key, []).append(other.name)
        out = []
        for key in sorted(owners):
            section, name = key.split(".")
            value, default = getattr(params[section], name), getattr(
                type(params[section])(), name)
            if value != default:
                out.append(f"{key}: {value!r} is read by {' and '.join(sorted(owners[key]))} "
                           f"only; {self.name} ignores it: remove it (default {default!r})")
        return out

    # ---- sample: the built-in dataset, byte-identical on every machine

    def sample(self, p):
        """Yield (relative path, bytes) of the built-in sample, in a fixed order (p: the
        sample section's params)."""
        raise NotImplementedError(f"task {self.name} has no built-in sample")

    # ---- ingest

    def read_annotations(self, source: Path, listing: list, settings: dict) -> Annotations:
        """Annotations for walk()'s listing [(path, kind, key)] (kind: file, empty, dirlink);
        settings: read_settings(params)."""
        return Annotations(values={rel: {"group": "", "timestamp": "", "split": ""}
                                   for rel, kind, _ in listing if kind == "file"})

    # ---- validate

    def annotation_key(self, row: dict) -> str:
        """What the file is annotated as: the same bytes under two keys is a label conflict."""
        return "\t".join(row[f] for f in self.annotation_fields)

    def check_columns(self, rows: list, ok: list, p, settings: dict) -> tuple:
        """(extra columns of the per-file table validate checks (None where a check skips),
        findings: what reason() needs beyond the row, passed back to it; None by default).
        settings: check_settings(params)."""
        return {}, None

    def file_expectations(self, p) -> list:
        """[(check, great_expectations expectation)] over check_columns' columns."""
        return []

    def reason(self, check: str, row: dict, p, findings, settings: dict) -> str:
        """Why a file fails one of the task's file checks (findings: what check_columns
        returned beside its columns; settings: check_settings(params))."""
        return check

    def dataset_findings(self, usable: list, p, offenders) -> dict:
        """{check: {key: reason}} of dataset-level problems over the usable rows.
        offenders(frame, [(check, expectation)], key_column) runs great_expectations."""
        return {}

    def dataset_metrics(self, usable: list) -> dict:
        """Extra keys of metrics/validation.json over the usable rows (segmentation: pixel
        frequency and image share per class). Default: none."""
        return {}

    def label_counts(self, rows: list) -> dict:
        """{class: count} of rows, for balance checks, split counts and the report."""
        return {}

    # ---- prepare

    def prepare_meta(self, splits: dict) -> dict:
        """The task's part of meta.json (its meta_keys), from {split: rows}."""
        return {}

    # prepare.letterbox: None = not supported (the targets would not follow the padding),
    # False = supported and off by default (auto), True = on by default
    letterbox = None
    # True: the encoder is called encode(row, pixels, size), size the image's upright
    # (width, height) before the resize (what a letterbox's geometry needs)
    encoder_takes_size = False

    def encoder(self, meta: dict):
        """A function (row, pixels) -> the stored target of one sample (pixels: its uint8
        HxWxC model input), given the task's meta. At prepare time meta also holds "source",
        the data.source folder (where a task finds annotation files such as masks)."""
        raise NotImplementedError

    # ---- train

    def build_model(self, name: str, meta: dict):
        raise NotImplementedError

    def head(self, model) -> str:
        """Name of the module that maps features to the outputs: fine-tuning re-initialises it
        when its shape differs, and keeps it trainable under train.freeze_backbone and LoRA.
        Default: the last nn.Linear."""
        from stages.lib.model.models import head_name

        return head_name(model)

    def lora_targets(self, model) -> list:
        """Module-name patterns (fnmatch) LoRA adapts when train.lora_targets is []: the
        task's backbone and neck. Only nn.Linear and ungrouped, undilated nn.Conv1d/Conv2d
        outside the head are ever adapted (peft merges only those exactly). Default: []:
        every such module."""
        return []

    def augment(self, x, y, p, seed: int):
        """Augment one sample; input and target move together. Default: the modality's
        augmentation, which leaves a target that does not depend on geometry unchanged."""
        return self.modality.augment(x, p, seed), y

    def augment_batch(self, x, y, p, seeds):
        """augment() of a whole batch (x: N x ..., y: its targets, on the batch's device; seeds:
        each sample's (seed, epoch, index) seed), as batched tensor ops drawing each sample's
        parameters exactly as augment draws them; train uses it on a GPU (train.batch_augment).
        Optional: by default the modality's batched augmentation when the task keeps the
        default augment and the modality has one (image: stages/lib/modality/imagebatch.py),
        otherwise augment per sample, stacked (same bytes, one sample at a time), so a task
        with only augment still trains everywhere."""
        import torch

        batched = getattr(self.modality, "augment_batch", None)
        if type(self).augment is Task.augment and batched is not None:
            return batched(x, p, seeds), y
        pairs = [self.augment(xi, yi, p, int(s)) for xi, yi, s in zip(x, y, seeds, strict=True)]
        return torch.stack([a for a, _ in pairs]), torch.stack([b for _, b in pairs])

    def loss(self, outputs, targets, p):
        """The training loss (a scalar tensor) of one batch: the shared loop calls
        loss(model(x), targets, p) (stages/lib/model/models.py forward_loss, which sums the losses
        of a model that takes the targets itself instead)."""
        raise NotImplementedError

    def val_sums(self, outputs, targets) -> tuple:
        """(sum of the loss, sum of the metric) over a validation batch; train divides by n."""
        raise NotImplementedError

    # ---- evaluate

    def evaluate(self, outputs, targets, paths: list, images, meta: dict, p) -> tuple:
        """(headline metrics for metrics/eval.json, {file name: bytes} for plots/eval/).
        images: the uint8 test arrays the model saw (memory-mapped)."""
        raise NotImplementedError

    # ---- export

    def agree(self, reference, candidate):
        """Per item: does the exported model make the same decision? Default: always."""
        import numpy as np

        return np.ones(len(reference), dtype=bool)

    def parity(self, reference, candidate, params: dict):
        """None (the default: export compares the outputs element by element, within
        export.atol/rtol), or per item (max |difference| that counts, agrees): a task whose
        outputs are not comparable element by element (detection: boxes matched one to one)
        decides itself; an item fails when it disagrees. params: {section: typed params}."""
        return None

    # keys of export_metadata that predict and serve read into model.meta when an exported
    # model carries them (detection: score_threshold, the default of --score-threshold)
    decode_metadata: tuple = ()

    def export_metadata(self, params: dict) -> dict:
        """Extra ONNX metadata of the task's (detection: the decoding's score and NMS
        thresholds), JSON-encoded like the rest; params: {section: typed params}. Default:
        none. (Whether a model exports at a fixed batch its model says: stages/lib/model/models.py
        export_batch.)"""
        return {}

    def describe(self, outputs_row) -> str:
        """One item's decision, for the parity gate's message."""
        return ""

    # ---- predict and serve

    # {field: JSON type} of one prediction: predict's columns after `path`, serve's answer
    prediction_fields: dict = {}
    # model.meta keys of predict/serve options the task's decode reads, beyond k (ocr: "beam",
    # from --beam); the tools refuse such an option for a task that does not list it
    decode_options: tuple = ()

    def decode(self, outputs, meta: dict, k: int) -> list:
        """One prediction dict (prediction_fields) per item of a batch of outputs (numpy);
        k: how many alternatives to list where the task has them (classification's top-k)."""
        raise NotImplementedError

    def views(self, meta: dict) -> list:
        """Test-time views: functions of a batch of stored inputs (uint8, as the modality reads
        them) whose outputs decode also reads (speech with a lexicon: its confidence,
        stages/tasks/speech/views.py). evaluate and predict/serve (tools/inference.py) run the
        model on each and hand their outputs to evaluate(..., views=) and decode(..., views=),
        so the confidence predict answers is the one evaluate scores. Default: none."""
        return []

    def write_prediction(self, row: dict, out) -> dict:
        """predict --out-dir: write the prediction file of one row (its `path` is the input)
        at out.target(path, name) (out: a stages.lib.data.outdir.OutDir), only when
        out.refuse(...) allows it (otherwise the row becomes an error row), and return the
        row as it should be written. Default: no file."""
        return row

    def empty_prediction(self) -> dict:
        """The prediction fields of a row whose input failed (its error says why)."""
        return dict.fromkeys(self.prediction_fields)

    # ---- tools.smoke: a small seeded subset of the configured data (stages/lib/data/subset.py)

    def subset_group(self, values: dict) -> str:
        """The group a file is drawn in for the smoke run, from its annotation values: its
        class where the task has classes; "" (the default) draws files, whatever they hold."""
        return ""

    def subset_annotations(self, source: Path, dest: Path, annotations: Annotations,
                           chosen: set) -> None:
        """Write the annotation files of the chosen images into dest (the subset's source).
        Default (stages/lib/data/subset.py): an annotation file named like an image (a.txt beside
        or mirroring a.jpg) goes with that image; any other (labels.csv, classes.txt) is
        copied whole. Override when a shared file must be cut down to the chosen images."""
        from stages.lib.data.subset import copy_annotations

        copy_annotations(source, dest, annotations, chosen)


def train_of(images: list) -> list:
    """The train images of fit_prepare's facts, or all of them when none is marked train."""
    return [i for i in images if i[0] == "train"] or images


def fit_channels(images: list) -> tuple:
    """fit_prepare's channels: 3 when any image (split, width, height, grey) is colour."""
    colour = sum(not grey for *_, grey in images)
    return ("prepare.channels", 3 if colour else 1,
            f"{colour} of {len(images)} images are colour" if colour
            else f"all {len(images)} images are grey")
