"""The one typed loader for params.yaml.

Each stage reads only its own section. A key that is not declared here (a typo such as
`train.lr_rate`) or a value of the wrong type is an error that names the key, so a misspelt
knob can never be silently ignored.
"""
import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import yaml

from stages.lib.io import StageError

PARAMS_FILE = "params.yaml"


@dataclass(frozen=True)
class Data:
    source: str = "data/sample"  # an ImageFolder tree: <source>/<class>/<image>


@dataclass(frozen=True)
class Sample:
    per_class: int = 0  # keep only the first N images of each digit; 0 keeps all 1,797


@dataclass(frozen=True)
class Ingest:
    workers: int = 0  # processes that hash and decode; 0 = all cores


@dataclass(frozen=True)
class Validate:
    min_side: int = 8  # images with a smaller width or height are rejected
    max_pixels: int = 50_000_000  # larger images are never decoded (decompression bombs)
    formats: list[str] = dataclasses.field(  # Pillow format names accepted
        default_factory=lambda: ["BMP", "GIF", "JPEG", "PNG", "PPM", "TIFF", "WEBP"])
    classes: list[str] = dataclasses.field(default_factory=list)  # expected; [] = any
    min_per_class: int = 5  # fewest usable images a class may have
    max_imbalance: float = 20.0  # largest class / smallest class, at most
    near_dup_distance: int = 4  # phash Hamming distance at or below which images are near-dups
    on_error: str = "fail"  # fail | quarantine (list bad files in data/quarantine.csv, go on)


@dataclass(frozen=True)
class Split:
    by: str = "hash"  # hash (stable as data grows) | time (chronological, needs timestamps)
    seed: int = 42
    val: float = 0.15
    test: float = 0.15


@dataclass(frozen=True)
class Prepare:
    image_size: int = 16
    channels: int = 1  # 1 = greyscale, 3 = RGB
    mean: list[float] = dataclasses.field(default_factory=lambda: [0.5])
    std: list[float] = dataclasses.field(default_factory=lambda: [0.5])


@dataclass(frozen=True)
class Train:
    model: str = "small_cnn"  # or a torchvision architecture name, e.g. resnet18
    epochs: int = 15
    batch_size: int = 32
    lr: float = 0.003
    optimizer: str = "adamw"  # adamw | sgd
    weight_decay: float = 0.0001
    warmup_epochs: int = 0  # linear warm-up epochs before the cosine decay
    label_smoothing: float = 0.0
    grad_accum_steps: int = 1  # micro-batches per optimiser step
    grad_clip: float = 0.0  # max global gradient norm; 0 = off
    precision: str = "fp32"  # fp32 (mixed precision off) | bf16 | fp16 (with a GradScaler)
    seed: int = 0
    num_workers: int = 0  # DataLoader worker processes; never changes the result
    deterministic: bool = True  # torch deterministic algorithms (+ cuDNN/cuBLAS flags on GPU)
    aug_crop_scale: float = 1.0  # random resized crop, min area fraction; 1.0 = off
    aug_hflip: float = 0.0  # horizontal flip probability; 0 = off
    aug_rotate: float = 0.0  # max rotation in degrees; 0 = off
    aug_jitter: float = 0.0  # brightness/contrast jitter strength; 0 = off
    init_from: str = ""  # weights file or a previous model.pt to start from; "" = random init
    freeze_backbone: bool = False  # with init_from: train only the classification head
    checkpoint_every_steps: int = 0  # also write last.pt every N optimiser steps; 0 = per epoch
    best_metric: str = "val_acc"  # val_acc (higher is better) | val_loss: picks best.pt
    nproc: int = 1  # processes; > 1 runs under torchrun (DDP: gloo on CPU, nccl on GPU)


@dataclass(frozen=True)
class Evaluate:
    batch_size: int = 256
    bad_cases: int = 16  # misclassified images shown in plots/bad_cases.png, worst first
    calibration_bins: int = 15  # equal-width confidence bins of the expected calibration error


@dataclass(frozen=True)
class Export:
    atol: float = 0.0001  # an image fails when max|logit diff| > atol + rtol * max|logit|
    rtol: float = 0.0001
    parity_samples: int = 0  # test images checked for parity (first N of test.csv); 0 = all
    parity_batch: int = 64  # the larger batch size tried besides batch size 1
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


def load(section: str, path=PARAMS_FILE):
    """Return the typed params of one section; unknown sections or keys are errors naming them."""
    return _typed(_read(path), section, Path(path))


def load_all(path=PARAMS_FILE) -> dict:
    """{section: typed params} for every section, from one read of the file."""
    raw = _read(path)
    return {section: _typed(raw, section, Path(path)) for section in SECTIONS}


def _read(path) -> dict:
    path = Path(path)
    if not path.exists():
        raise StageError(f"{path} not found: run the stage from the project root.")
    raw = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise StageError(
            f"{path}: unknown section(s) {', '.join(unknown)}; "
            f"known sections: {', '.join(SECTIONS)}."
        )
    return raw


def _typed(raw: dict, section: str, path: Path):
    cls = SECTIONS[section]
    values = raw.get(section) or {}
    if not isinstance(values, dict):
        raise StageError(f"{path}: `{section}` must be a mapping of keys to values.")
    known = {f.name: f for f in dataclasses.fields(cls)}
    for key in sorted(values):
        if key not in known:
            raise StageError(
                f"{path}: unknown key `{section}.{key}`; known keys in `{section}`: "
                f"{', '.join(known)}. Fix the spelling or remove it."
            )
    hints = typing.get_type_hints(cls)
    return cls(**{k: _coerce(f"{section}.{k}", v, hints[k], path) for k, v in values.items()})


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
