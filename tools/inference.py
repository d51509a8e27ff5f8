"""Inference shared by predict and serve: load a model, read images into a batch, decode logits.

The onnxruntime path imports only numpy, Pillow and onnxruntime (never torch), so a machine
that serves the exported model does not need PyTorch. Preprocessing is `stages.lib.images`
(the same `load_image` + `normalize` that prepare/evaluate/export use), behind a header check
that refuses decompression bombs before any pixel is decoded.
"""
import errno
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stages.lib.images import sha256_file
from stages.lib import safefs
from stages.lib.io import StageError
from stages.lib.params import MAX_PIXELS
from tools.options import BACKENDS

ONNX_MODEL = Path("models/model.onnx")
TORCH_MODEL = Path("models/model.pt")
OPENVINO_MODEL = Path("models/openvino/model.xml")  # export.formats: [..., openvino]
META_KEYS = ("image_size", "channels", "mean", "std")  # the task adds its own (classes...)


class BadImage(ValueError):
    """An input that cannot become model input.

    `kind`: "not_image", "corrupt", "too_large", "unreadable" (missing file, no permission, a
    symlink loop, a socket) or "not_regular" (a FIFO, a device: never read).
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def open_regular(path):
    """A binary file object on path, which must be a regular file; BadImage ("unreadable" or
    "not_regular") otherwise. Opened non-blocking and checked with fstat before a byte is
    read, so a FIFO, socket or device is never read from (a FIFO would block forever)."""
    try:
        return safefs.open_regular(path)
    except OSError as exc:
        why = {errno.ENXIO: "a socket (not read)", errno.ELOOP: "a symlink loop"}.get(
            exc.errno, f"{type(exc).__name__}: {exc.strerror}")
        raise BadImage("unreadable", f"cannot open: {why}") from None
    except safefs.NotRegular as exc:
        raise BadImage("not_regular", f"{safefs.mode_text(exc.mode)}: not read") from None


class Pixels(np.ndarray):
    """A model-input image that remembers its original (width, height): detection's boxes go
    back to the original pixels. Behaves as the plain uint8 array everywhere else."""

    source_size = None


def sized(pixels: np.ndarray, size) -> np.ndarray:
    out = pixels.view(Pixels)
    out.source_size = (int(size[0]), int(size[1]))
    return out


def read_image(src, image_size: int, channels: int, max_pixels: int = MAX_PIXELS,
               letterbox=False) -> np.ndarray:
    """uint8 HxWxC from a path or a binary file object; raise BadImage naming what is wrong.

    The header is read first: an image whose width x height exceeds max_pixels is refused
    before its pixels are decoded (a 50-byte PNG can declare 100k x 100k pixels).
    """
    from PIL import Image, UnidentifiedImageError

    from stages.lib.images import load_image, upright_size

    if isinstance(src, (str, os.PathLike)):
        with open_regular(src) as f:
            return read_image(f, image_size, channels, max_pixels, letterbox)
    try:
        with Image.open(src) as img:
            width, height = img.size
            upright = upright_size(img)
    except UnidentifiedImageError:
        raise BadImage("not_image", "not an image Pillow can read") from None
    except Image.DecompressionBombError as exc:
        raise BadImage("too_large", f"image too large: {exc}") from None
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        raise BadImage("unreadable", f"cannot open: {type(exc).__name__}: {exc.strerror}") from None
    except (OSError, ValueError, SyntaxError) as exc:  # unreadable file, bad header fields
        message = f"cannot read image header: {type(exc).__name__}: {exc}"
        raise BadImage("corrupt", message) from None
    if width * height > max_pixels:
        raise BadImage("too_large", f"image has {width}x{height} = {width * height} pixels, "
                                    f"over the limit of {max_pixels}")
    if hasattr(src, "seek"):
        src.seek(0)
    try:
        return sized(load_image(src, image_size, channels, letterbox), upright)
    except Exception as exc:  # PIL raises many types on truncated or corrupt data
        message = f"cannot decode: {type(exc).__name__}: {exc}".replace("\n", " ")
        raise BadImage("corrupt", message) from None


HIGH_BIT_EXTRA = 26  # bytes per pixel to_model_mode's numpy scaling of 16/32-bit grey peaks at


def decode_bytes(mode: str, size: tuple, channels: int, image_size: int = 64) -> int:
    """About the most memory (bytes) decoding an image of this mode and size, converting it
    with to_model_mode and resizing it to image_size takes at once. Pillow keeps 1 byte per
    pixel for L/P/1, 2 for 16-bit, 4 for everything else (RGB as RGBX), and an 8-byte pointer
    per line in every copy; the conversion makes copies; the resize's first (horizontal) pass
    makes an image_size x height one. A 1 x 39,000,000 image costs 8 bytes per line per copy:
    over 1 GB for 39 MB of pixels."""
    width, height = size
    pixels = width * height
    stored = 1 if mode in ("1", "L", "P") else 2 if mode.startswith("I;16") else 4
    if mode in ("I", "F") or mode.startswith("I;16"):
        extra, copies = HIGH_BIT_EXTRA, 2
    elif mode in ("RGBA", "LA", "PA", "La", "RGBa", "P"):  # P: may carry transparency
        extra, copies = 4 + 4 + 1, 4
    elif mode == ("L" if channels == 1 else "RGB"):
        extra, copies = 0, 1
    elif mode in ("RGB", "L"):  # one conversion to the other
        extra, copies = (1 if channels == 1 else 4), 2
    else:  # CMYK, YCbCr, 1...: to RGB, then to L for grey
        extra, copies = 4 + 1, 3
    from stages.lib.images import input_hw

    resize = input_hw(image_size)[1] * height * 4 + height * 8
    return (pixels * (stored + extra) + copies * height * 8 + resize) * 5 // 4  # +25%: codecs


def read_header(src, channels: int, max_pixels: int, budget: int = 0, image_size: int = 64):
    """(decoded bytes, draft size or None) of an image, from its header alone; BadImage when
    it is over max_pixels or, with a budget (bytes), would decode to more. A JPEG over the
    budget is decoded at a reduced DCT scale (Pillow's draft: 1/2, 1/4 or 1/8) when that
    fits: the draft size returned."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(src) as img:
            width, height, mode, fmt = img.width, img.height, img.mode, img.format
    except UnidentifiedImageError:
        raise BadImage("not_image", "not an image Pillow can read") from None
    except Image.DecompressionBombError as exc:
        raise BadImage("too_large", f"image too large: {exc}") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise BadImage("corrupt", f"cannot read image header: {type(exc).__name__}: "
                                  f"{exc}") from None
    finally:
        if hasattr(src, "seek"):
            src.seek(0)
    if width * height > max_pixels:
        raise BadImage("too_large", f"image has {width}x{height} = {width * height} pixels, "
                                    f"over the limit of {max_pixels}")
    cost = decode_bytes(mode, (width, height), channels, image_size)
    if not budget or cost <= budget:
        return cost, None
    if fmt == "JPEG":
        for k in (2, 4, 8):
            size = (-(-width // k), -(-height // k))
            reduced = decode_bytes(mode, size, channels, image_size)
            if reduced <= budget:
                return reduced, size
    raise BadImage("too_large", f"image of {width}x{height} {mode} pixels needs about "
                                f"{cost / 2**20:.0f} MiB to decode, over the decode budget of "
                                f"{budget / 2**20:.0f} MiB")


def load_drafted(src, image_size: int, channels: int, draft, letterbox=False) -> np.ndarray:
    """load_image, with the JPEG decoded at the reduced scale read_header chose (draft: a size
    or None): uint8 HxWxC; BadImage when it fails."""
    from PIL import Image

    from stages.lib.images import fit, input_hw, load_image, to_model_mode, upright_size

    try:
        with Image.open(src) as img:
            size = upright_size(img)
        if hasattr(src, "seek"):
            src.seek(0)
        if draft is None:
            return sized(load_image(src, image_size, channels, letterbox), size)
        with Image.open(src) as img:
            img.draft("L" if channels == 1 else "RGB", draft)
            arr = fit(to_model_mode(img, channels), image_size, letterbox, size)
        return sized(arr.reshape(*input_hw(image_size), channels), size)
    except Exception as exc:  # PIL raises many types on truncated or corrupt data
        message = f"cannot decode: {type(exc).__name__}: {exc}".replace("\n", " ")
        raise BadImage("corrupt", message) from None


@dataclass
class Model:
    """A loaded model: `run(uint8 NxHxWxC) -> float32 outputs` plus what is needed to feed it
    and to decode its outputs (its task, and the task's meta such as `classes`)."""

    backend: str
    path: str
    image_size: int  # or [height, width] (text lines)
    channels: int
    mean: list
    std: list
    sha256: str
    runner: object = field(repr=False, default=None)
    info: dict = field(default_factory=dict)
    task: object = field(repr=False, default=None)  # a stages.tasks.base.Task
    meta: dict = field(default_factory=dict)  # the task's keys of the model's metadata
    # sha256 of the trained weights file (models/model.pt): the same for model.pt and the
    # model.onnx exported from it (its metadata's model_sha256); predict's rows carry it
    weights_sha256: str = ""
    # export.width_buckets of a model that takes any input width (its ONNX metadata): each
    # input runs at the smallest of these widths that holds it; [] = image_size's width
    width_buckets: list = field(default_factory=list)
    # prepare.letterbox as the model was trained ({"fill", "align"} or False: squash): inputs
    # are resized the same way, and detection's boxes go back through it
    letterbox: object = False

    def __post_init__(self):
        if self.task is None:
            from stages.tasks import default_task

            self.task = default_task()
        if not self.weights_sha256:
            self.weights_sha256 = self.sha256

    @property
    def classes(self) -> list:
        return self.meta.get("classes", [])

    @property
    def version(self) -> str:
        """Short content hash of the model file: changes whenever the weights change."""
        return self.sha256[:12]

    def logits(self, batch: np.ndarray) -> np.ndarray:
        """float32 logits NxK of a uint8 NxHxWxC batch (normalised here, like everywhere else)."""
        from stages.lib.images import normalize

        return self.runner(normalize(batch, self.mean, self.std))


def load_onnx(path, threads: int = 0) -> Model:
    import onnxruntime as ort

    from stages.lib.formats import batched, onnx_session

    path = Path(path)
    if not path.is_file():
        raise StageError(f"{path} not found: run the export stage first (`dvc repro export`) "
                         f"or pass --model.")
    try:
        session = onnx_session(path, threads)  # the export stage's session, on CPU
    except Exception as exc:
        raise StageError(f"{path}: onnxruntime cannot load it: {exc}") from None
    props = session.get_modelmeta().custom_metadata_map
    task, meta, task_meta = task_and_meta(props, path)
    model_meta = session.get_modelmeta()
    info = {"producer": model_meta.producer_name, "graph": model_meta.graph_name,
            "onnxruntime": ort.__version__}
    run = batched(session)  # a fixed-batch graph (torchvision's detectors) image by image

    weights = json.loads(props["model_sha256"]) if "model_sha256" in props else ""
    return Model("onnxruntime", path.name, sha256=sha256_file(path), runner=run, info=info,
                 task=task, meta=task_meta, weights_sha256=weights,
                 width_buckets=json.loads(props.get("width_buckets", "[]")), **meta)


def load_torch(path, threads: int = 0) -> Model:
    import torch

    from stages.tasks import load_model
    from stages.lib.params import DEFAULT_TASK
    from stages.tasks import get

    path = Path(path)
    if threads:
        torch.set_num_threads(threads)
    model, meta = load_model(path)

    def run(x):
        with torch.no_grad():
            return model(torch.from_numpy(x)).numpy()

    task = get(meta.get("task", DEFAULT_TASK))
    return Model("torch", path.name, sha256=sha256_file(path), runner=run,
                 info={"torch": torch.__version__, "architecture": meta.get("model", "")},
                 task=task, meta={k: meta[k] for k in task.meta_keys},
                 width_buckets=meta.get("width_buckets", []),  # prepare.width_buckets' list
                 letterbox=meta.get("letterbox", False), **{k: meta[k] for k in META_KEYS})


def task_and_meta(props: dict, path):
    """(task, preprocessing meta, task meta) from an exported model's metadata
    ({key: JSON string}), which the ONNX file and everything converted from it carry."""
    from stages.lib.params import DEFAULT_TASK
    from stages.tasks import get

    task = get(json.loads(props.get("task", json.dumps(DEFAULT_TASK))))
    missing = [k for k in (*task.meta_keys, *META_KEYS) if k not in props]
    if missing:
        raise StageError(f"{path}: metadata lacks {', '.join(missing)}; export it with "
                         f"`python -m stages.export`.")
    return (task, {**{k: json.loads(props[k]) for k in META_KEYS},
                   "letterbox": json.loads(props.get("letterbox", "false"))},
            {k: json.loads(props[k]) for k in (*task.meta_keys, *task.decode_metadata)
             if k in props or k in task.meta_keys})


def load_openvino(path, threads: int = 0) -> Model:
    """The OpenVINO IR (model.xml beside model.bin) on OpenVINO's CPU plugin, in f32."""
    from stages.lib import formats

    path = Path(path)
    if not path.is_file():
        raise StageError(f"{path} not found: add openvino to export.formats and run the export "
                         f"stage (`dvc repro export`), or pass --model.")
    try:
        props = formats.openvino_metadata(path)
        run = formats.openvino_runner(path, threads=threads)
    except Exception as exc:
        raise StageError(f"{path}: OpenVINO cannot load it: {exc}") from None
    task, meta, task_meta = task_and_meta(props, path)
    ov = formats.import_openvino()
    both = hashlib.sha256(f"{sha256_file(path)} {sha256_file(path.with_suffix('.bin'))}"
                          .encode()).hexdigest()  # the graph and its weights
    return Model("openvino", path.name, sha256=both,
                 runner=run, info={"openvino": ov.get_version(), "precision": "f32"},
                 task=task, meta=task_meta, **meta)


def load(backend: str, path=None, threads: int = 0) -> Model:
    """Load models/model.onnx (onnxruntime), models/model.pt (torch) or
    models/openvino/model.xml (openvino), or the given path."""
    if backend == "onnxruntime":
        return load_onnx(path or ONNX_MODEL, threads)
    if backend == "openvino":
        return load_openvino(path or OPENVINO_MODEL, threads)
    if backend == "torch":
        return load_torch(path or TORCH_MODEL, threads)
    raise StageError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")


def decode(model: Model, outputs: np.ndarray, k: int, sizes=None) -> list[dict]:
    """The predictions of a batch of model outputs, one dict per image: the model's task
    decodes them (classification: label, score = its softmax probability, and the k most
    probable classes as topk, best first). The one place outputs become predictions
    (predict's rows, serve's answers)."""
    meta = {**model.meta, "image_size": model.image_size, "letterbox": model.letterbox,
            "source_sizes": sizes or [None] * len(outputs)}
    return model.task.decode(outputs, meta, k)


def bucket_width(model: Model, source_size) -> int:
    """The input width an image of source_size (w, h) runs at: the smallest of the model's
    width_buckets that holds the image scaled to the model's height (as
    stages.lib.images.fit scales it), else the largest bucket."""
    from stages.lib.images import input_hw

    height, width = input_hw(model.image_size)
    if not model.width_buckets or source_size is None:
        return width
    w, h = source_size
    scaled = min(max(1, round(w * height / max(h, 1))), width)
    return next((b for b in model.width_buckets if b >= scaled), model.width_buckets[-1])


def predict_batch(model: Model, images: list[np.ndarray], k: int) -> list[dict]:
    """The prediction of each uint8 HxWxC image, in order. A model with width_buckets runs
    each image at its bucket width (the fitted image cut there: fit pads a narrower line on
    the right, so the cut is what fitting it to the bucket width gives), one model call per
    width."""
    if not images:
        return []
    sizes = [getattr(img, "source_size", None) for img in images]  # original (w, h)
    if not model.width_buckets:
        return decode(model, model.logits(np.stack(images)), k, sizes)
    widths = [bucket_width(model, size) for size in sizes]
    out = [None] * len(images)
    for width in sorted(set(widths)):
        chosen = [i for i, w in enumerate(widths) if w == width]
        batch = np.stack([np.asarray(images[i])[:, :width] for i in chosen])
        for i, pred in zip(chosen, decode(model, model.logits(batch), k,
                                          [sizes[i] for i in chosen]), strict=True):
            out[i] = pred
    return out


def describe(model: Model, metrics_path=None) -> dict:
    """What GET /model returns: classes, input, provenance, eval metrics when present."""
    out = {"backend": model.backend, "file": model.path, "version": model.version,
           "sha256": model.sha256, "task": model.task.name,
           "classes": [str(c) for c in model.classes],
           "input": {"image_size": model.image_size, "channels": model.channels,
                     "mean": model.mean, "std": model.std},
           "provenance": model.info, "metrics": None}
    if metrics_path and Path(metrics_path).is_file():
        out["metrics"] = json.loads(Path(metrics_path).read_text())
    return out
