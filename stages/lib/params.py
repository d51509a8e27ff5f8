"""The one typed loader for params.yaml, with every choice and range declared beside its field.

A key that is not declared here (a typo such as `train.lr_rate`), a value of the wrong type, a
value outside its declared choices or range, or a combination a section's `problems()` rejects
is an error that names the key and what is allowed, so a bad knob never reaches a stage.

Each stage reads its own section; the few reads across sections are declared once, in
`STAGE_PARAMS`, which dvc.yaml's `params:` lists must match (a test checks it). The top-level
`task` key names the task (a package under stages/tasks/); task-shaped knobs live in the stage
section that reads them (validate.classes, evaluate.calibration_bins...).
"""
import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import yaml

from stages.lib.io import StageError

PARAMS_FILE = "params.yaml"
DEFAULT_TASK = "classification"
MAX_PIXELS = 50_000_000
# "no weights file": a git-tracked placeholder that train.init_from and evaluate.compare_with
# name by default, because dvc.yaml lists those params as deps and DVC fails on an empty path
NO_WEIGHTS = "weights/none"  # default of validate.max_pixels, which predict and serve follow too


def knob(default, *, choices=None, at_least=None, above=None, at_most=None, below=None):
    """A field with its allowed values: `choices`, or bounds (inclusive `at_least`/`at_most`,
    exclusive `above`/`below`). Lists (mutable defaults) are copied per instance."""
    meta = {k: v for k, v in (("choices", choices), ("at_least", at_least), ("above", above),
                              ("at_most", at_most), ("below", below)) if v is not None}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Data:
    source: str = "data/sample"  # the dataset, in one of the task's layouts


@dataclass(frozen=True)
class Sample:
    per_class: int = knob(0, at_least=0)  # first N images of each class; 0 keeps all


@dataclass(frozen=True)
class Ingest:
    workers: int = knob(0, at_least=0)  # processes that hash and decode; 0 = all cores
    # rehash cached files each run: a seeded sample, all of them, or none; a mismatch fails
    verify_cache: str = knob("sample", choices=["sample", "all", "none"])


@dataclass(frozen=True)
class Validate:
    min_side: int = knob(8, at_least=1)  # images with a smaller width or height are rejected
    max_pixels: int = knob(MAX_PIXELS, at_least=1)  # larger images are never decoded (bombs)
    formats: list[str] = knob(["BMP", "GIF", "JPEG", "PNG", "PPM", "TIFF", "WEBP"])  # Pillow's
    classes: list[str] = knob([])  # expected class names; [] = any
    min_per_class: int = knob(5, at_least=0)  # fewest usable images a class may have
    max_imbalance: float = knob(20.0, at_least=1.0)  # largest class / smallest class, at most
    near_dup_distance: int = knob(4, at_least=-1, at_most=64)  # phash bits; -1 = off
    on_error: str = knob("fail", choices=("fail", "quarantine"))  # quarantine: list, go on


@dataclass(frozen=True)
class Split:
    # hash: stable as data grows | time: chronological | given: the dataset's own split
    by: str = knob("hash", choices=("hash", "time", "given"))
    seed: int = 42
    val: float = knob(0.15, above=0.0, below=1.0)  # given: share of train carved out when no val
    test: float = knob(0.15, above=0.0, below=1.0)  # given: unused
    balance_z: float = knob(4.0, at_least=0.0)  # per-class share tolerance, in binomial sds
    on_imbalance: str = knob("warn", choices=("warn", "fail"))  # a class's share off target

    def problems(self) -> list[str]:
        if self.val + self.test >= 1:
            return [f"split.val + split.test must be below 1 (got {self.val} + {self.test}): "
                    f"the train split would be empty"]
        return []


@dataclass(frozen=True)
class Prepare:
    image_size: int = knob(16, at_least=1)
    channels: int = knob(1, choices=(1, 3))  # 1 = greyscale, 3 = RGB
    mean: list[float] = knob([0.5])
    std: list[float] = knob([0.5])
    shard_size: int = knob(1024, at_least=1)  # samples per shard file; memory is per shard
    workers: int = knob(0, at_least=0)  # decoding processes; 0 = all cores

    def problems(self) -> list[str]:
        if len(self.mean) != self.channels or len(self.std) != self.channels:
            return [f"prepare.mean and prepare.std need one value per channel "
                    f"(prepare.channels is {self.channels}; got {len(self.mean)} and "
                    f"{len(self.std)})"]
        if any(s <= 0 for s in self.std):
            return ["prepare.std values must be above 0"]
        return []


@dataclass(frozen=True)
class Train:
    model: str = "small_cnn"  # or a torchvision architecture name, e.g. resnet18
    epochs: int = knob(15, at_least=1)
    batch_size: int = knob(32, at_least=1)
    lr: float = knob(0.003, above=0.0)
    # precision is never called "off": YAML 1.1 (PyYAML) reads a bare off as false, and
    # `dvc exp run -S` rewrites params.yaml without quotes
    optimizer: str = knob("adamw", choices=("adamw", "sgd"))
    weight_decay: float = knob(0.0001, at_least=0.0)
    warmup_epochs: int = knob(0, at_least=0)  # linear warm-up epochs before the cosine decay
    label_smoothing: float = knob(0.0, at_least=0.0, below=1.0)
    grad_accum_steps: int = knob(1, at_least=1)  # micro-batches per optimiser step
    grad_clip: float = knob(0.0, at_least=0.0)  # max global gradient norm; 0 = off
    precision: str = knob("fp32", choices=("fp32", "bf16", "fp16"))  # fp32: mixed precision off
    seed: int = 0
    num_workers: int = knob(0, at_least=0)  # DataLoader worker processes; never changes results
    deterministic: bool = True  # torch deterministic algorithms (+ cuDNN/cuBLAS flags on GPU)
    aug_crop_scale: float = knob(1.0, above=0.0, at_most=1.0)  # random resized crop; 1.0 = off
    aug_hflip: float = knob(0.0, at_least=0.0, at_most=1.0)  # horizontal flip probability
    aug_rotate: float = knob(0.0, at_least=0.0, at_most=180.0)  # max rotation in degrees
    aug_jitter: float = knob(0.0, at_least=0.0)  # brightness/contrast jitter strength
    # weights file, checkpoint or previous model.pt to start from; NO_WEIGHTS (or "") = random
    # init. A path, so dvc.yaml can list it as a dep (DVC cannot depend on "": see NO_WEIGHTS)
    init_from: str = NO_WEIGHTS
    init_strict: bool = False  # any tensor not loaded as is (but a resized head) is an error
    freeze_backbone: bool = False  # with init_from: train only the head (= freeze all but it)
    freeze: list[str] = knob([])  # module-name patterns (fnmatch) whose parameters stay fixed
    lr_backbone: float = knob(0.0, at_least=0.0)  # lr of all but the head; 0 = train.lr
    adapter: str = knob("none", choices=("none", "lora"))  # lora: train low-rank adapters + head
    lora_rank: int = knob(8, at_least=1)
    lora_alpha: float = knob(16.0, above=0.0)  # adapter scale = lora_alpha / lora_rank
    lora_dropout: float = knob(0.0, at_least=0.0, below=1.0)
    lora_targets: list[str] = knob([])  # module-name patterns; [] = every conv/linear but head
    # trained: BatchNorm affine + running statistics train (and are checkpointed) | frozen:
    # BatchNorm stays in eval mode with the starting weights' statistics
    lora_batchnorm: str = knob("trained", choices=("trained", "frozen"))
    tensorboard: bool = False  # also write TensorBoard events to logs/tensorboard/ (untracked)
    checkpoint_every_steps: int = knob(0, at_least=0)  # also last.pt every N steps; 0 = epochs
    best_metric: str = knob("val_metric", choices=("val_metric", "val_loss"))  # picks best.pt
    nproc: int = knob(1, at_least=1)  # processes per machine; > 1 runs under torchrun (DDP)
    nnodes: int = knob(1, at_least=1)  # machines; > 1 meets at train.rdzv_endpoint (c10d)
    rdzv_endpoint: str = ""  # host:port of the c10d rendezvous (on the first machine)
    threads: int = knob(0, at_least=0)  # intra-op threads per process; 0 = its share of cores

    def problems(self) -> list[str]:
        out = []
        if self.batch_size < self.nproc * self.nnodes:
            out.append(f"train.batch_size ({self.batch_size}) is the global batch, split over "
                       f"train.nproc x train.nnodes ({self.nproc} x {self.nnodes}) processes: "
                       f"make it at least their product")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            out.append("train.nnodes > 1 needs train.rdzv_endpoint (host:port of the "
                       "rendezvous, reachable from every machine)")
        if self.warmup_epochs >= self.epochs:
            out.append(f"train.warmup_epochs must be below train.epochs ({self.epochs}), "
                       f"got {self.warmup_epochs}")
        if self.freeze_backbone and self.init_from in ("", NO_WEIGHTS):
            out.append("train.freeze_backbone needs train.init_from (the weights to keep)")
        return out


@dataclass(frozen=True)
class Evaluate:
    batch_size: int = knob(256, at_least=1)
    bad_cases: int = knob(16, at_least=0)  # worst mistakes drawn in plots/eval/bad_cases.png
    calibration_bins: int = knob(15, at_least=1)  # equal-width bins of the calibration error
    # another model.pt (the previous run's) scored on the same test set, beside this one
    compare_with: str = NO_WEIGHTS  # NO_WEIGHTS (or "") = none


@dataclass(frozen=True)
class Export:
    atol: float = knob(0.0001, at_least=0.0)  # an item fails: |diff| > atol + rtol * max|ref|
    rtol: float = knob(0.0001, at_least=0.0)
    parity_samples: int = knob(0, at_least=0)  # test images checked (first N); 0 = all
    parity_batch: int = knob(64, at_least=1)  # the larger batch size tried besides 1
    torchscript: bool = False  # also write models/torchscript/model.pt, behind the same gate


SECTIONS = {
    "data": Data,
    "sample": Sample,
    "ingest": Ingest,
    "validate": Validate,
    "split": Split,
    "prepare": Prepare,
    "train": Train,
    "evaluate": Evaluate,
    "export": Export,
}

# What each stage reads, in one place: its own section and the few reads across sections. Every
# stage also reads `task`. dvc.yaml's `params:` of each stage lists exactly these (tested).
STAGE_PARAMS = {
    "sample": ("sample",),
    "ingest": ("data.source", "ingest", "validate.max_pixels"),  # bombs are never decoded
    "validate": ("validate",),
    "split": ("split", "validate.near_dup_distance"),  # near-duplicates share a split
    "prepare": ("data.source", "prepare"),
    "train": ("train",),
    "evaluate": ("evaluate",),
    "export": ("data", "split", "prepare", "train", "export"),  # hashed into the ONNX metadata
}


def _coerce(key: str, value, ftype, path):
    def bad(expected):
        return StageError(
            f"{path}: `{key}` must be {expected}, got {value!r} ({type(value).__name__}). "
            f"Fix its value in {path}."
        )

    origin = typing.get_origin(ftype)
    if origin in (list, tuple):
        (item_type,) = set(typing.get_args(ftype)) - {Ellipsis}
        if not isinstance(value, list):
            raise bad(f"a list of {item_type.__name__}")
        return [_coerce(f"{key}[{i}]", v, item_type, path) for i, v in enumerate(value)]
    if isinstance(ftype, types.UnionType) or origin is typing.Union:
        if value is None and type(None) in typing.get_args(ftype):
            return None
        (ftype,) = set(typing.get_args(ftype)) - {type(None)}
    if ftype is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if ftype is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if ftype in (str, bool) and isinstance(value, ftype):
        return value
    raise bad(f"of type {ftype.__name__}")


def _allowed(key: str, value, meta: dict) -> str:
    """Why value breaks the field's declared choices or bounds; "" when it does not."""
    if "choices" in meta and value not in meta["choices"]:
        return f"`{key}` must be one of {', '.join(map(str, meta['choices']))}, got {value!r}"
    bounds = (("at_least", lambda v, b: v >= b, ">="), ("above", lambda v, b: v > b, ">"),
              ("at_most", lambda v, b: v <= b, "<="), ("below", lambda v, b: v < b, "<"))
    for name, ok, sign in bounds:
        if name in meta and not ok(value, meta[name]):
            return f"`{key}` must be {sign} {meta[name]}, got {value!r}"
    return ""


def read(path=PARAMS_FILE) -> dict:
    """The raw params file as a dict; a missing file is an error saying where to run."""
    path = Path(path)
    if not path.exists():
        raise StageError(f"{path} not found: run the stage from the project root (where "
                         f"params.yaml and dvc.yaml are), as `dvc repro` does.")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise StageError(f"{path}: expected a mapping of sections.")
    return raw


def task_name(path=PARAMS_FILE) -> str:
    """The `task` key: a task under stages/tasks/ (classification when absent)."""
    return task_of(read(path), path)


def task_of(raw: dict, path) -> str:
    """The `task` key of a params file already read."""
    name = raw.get("task", DEFAULT_TASK)
    if not isinstance(name, str) or not name.isidentifier():
        raise StageError(f"{path}: `task` must be a task name such as {DEFAULT_TASK}, "
                         f"got {name!r}.")
    return name


def parse(cls, section: str, values, path):
    """A section's dataclass from its raw mapping: names, types, choices, ranges, problems()."""
    values = values or {}
    if not isinstance(values, dict):
        raise StageError(f"{path}: `{section}` must be a mapping of keys to values.")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in sorted(values):
        if key not in fields:
            raise StageError(
                f"{path}: unknown key `{section}.{key}`; known keys in `{section}`: "
                f"{', '.join(fields)}. Fix the spelling or remove it."
            )
    hints = typing.get_type_hints(cls)
    typed = {k: _coerce(f"{section}.{k}", v, hints[k], path) for k, v in values.items()}
    obj = cls(**typed)
    for name, field in fields.items():
        why = _allowed(f"{section}.{name}", getattr(obj, name), field.metadata)
        if why:
            raise StageError(f"{path}: {why}. Fix it in {path}.")
    problems = obj.problems() if hasattr(obj, "problems") else []
    if problems:
        raise StageError(f"{path}: " + "; ".join(problems) + f". Fix it in {path}.")
    return obj


def load_all(path=PARAMS_FILE) -> dict:
    """{section: typed params} of every section, from one read of the file; unknown sections
    or keys are errors naming them."""
    return parse_all(read(path), path)


def parse_all(raw: dict, path) -> dict:
    """load_all of a params file already read."""
    unknown = sorted(set(raw) - set(SECTIONS) - {"task"})
    if unknown:
        raise StageError(
            f"{path}: unknown section(s) {', '.join(unknown)}; known sections: task, "
            f"{', '.join(SECTIONS)}."
        )
    return {section: parse(cls, section, raw.get(section), path)
            for section, cls in SECTIONS.items()}


def load(section: str, path=PARAMS_FILE):
    """Return the typed params of one section (every section is checked: a typo anywhere in
    the file stops every stage, not only the one that reads it)."""
    return load_all(path)[section]


def params_option(func):
    """The `--params` option every stage shares."""
    import click

    return click.option(
        "--params",
        "params_path",
        default=PARAMS_FILE,
        show_default=True,
        type=click.Path(dir_okay=False),
        help="The params file to read this stage's section from.",
    )(func)
