"""Inference shared by predict and serve: load a model, run batches of inputs, decode outputs.

The onnxruntime path imports only numpy, the modality's decoder (Pillow for images) and
onnxruntime (never torch), so a machine that serves the exported model does not need PyTorch.
Reading an input is the model's task's modality's (`model.modality.read`: for images
stages/lib/modality/imageserve.py, behind a header check that refuses decompression bombs
before anything is decoded), and so is `normalize`, the same that prepare/evaluate/export use.
"""
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stages.lib.io import StageError, sha256_file
from stages.lib.modality.spec import LETTERBOX, RECIPE
from stages.lib.model.provenance import model_version
from tools.options import BACKENDS

ONNX_MODEL = Path("models/model.onnx")
TORCH_MODEL = Path("models/model.pt")
OPENVINO_MODEL = Path("models/openvino/model.xml")  # export.formats: [..., openvino]


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
    # model.onnx exported from it (its metadata's model_sha256); the version derives from it
    weights_sha256: str = ""
    # the version the file declares (its metadata's model_version), "" when it has none
    declared_version: str = ""
    # export.width_buckets of a model that takes any input width (its ONNX metadata): each
    # input runs at the smallest of these widths that holds it; [] = image_size's width
    width_buckets: list = field(default_factory=list)
    # prepare.letterbox as the model was trained ({"fill", "align"} or False: squash): inputs
    # are resized the same way, and detection's boxes go back through it
    letterbox: object = False
    # a registered model's facts (tools/registry/models.py): artifact, version, stage, commit,
    # data_version, md5, metrics...; {} for a model given as a file path
    registry: dict = field(default_factory=dict)
    # a sound model's longest clip, in seconds (predict's and serve's --max-seconds); 0: the
    # audio modality's own MAX_SECONDS
    max_seconds: float = 0.0

    def __post_init__(self):
        if self.task is None:
            from stages.tasks import default_task

            self.task = default_task()
        if not self.weights_sha256:
            self.weights_sha256 = self.sha256

    @property
    def modality(self):
        """The task's modality (stages/lib/modality/): how an input is read and normalised."""
        return self.task.modality

    @property
    def recipe(self) -> dict:
        """The input recipe the model stores (stages/lib/modality/spec.py RECIPE), by key."""
        return dict(zip(RECIPE, (self.image_size, self.channels, self.mean, self.std),
                        strict=True))

    @property
    def spec(self):
        """The model's input spec (its modality's Spec), from the recipe it stores."""
        return self.modality.Spec.from_meta({**self.recipe, LETTERBOX: self.letterbox,
                                             "width_buckets": self.width_buckets})

    @property
    def classes(self) -> list:
        return self.meta.get("classes", [])

    @property
    def version(self) -> str:
        """The model's version (stages.lib.model.provenance.model_version): the sha256 prefix of its
        trained weights, the same for model.pt and every format exported from it; predict's
        rows, serve's answers and the report carry it. `sha256` names the file itself."""
        return self.declared_version or model_version(self.weights_sha256)

    def logits(self, batch: np.ndarray) -> np.ndarray:
        """float32 logits NxK of a batch of stored inputs (normalised here, like everywhere
        else)."""
        return self.runner(self.modality.normalize(batch, self.mean, self.std))


def load_onnx(path, threads: int = 0) -> Model:
    import onnxruntime as ort

    from stages.lib.model.formats import batched, onnx_session

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

    return Model("onnxruntime", path.name, sha256=sha256_file(path), runner=run, info=info,
                 task=task, meta=task_meta, **declared(props),
                 width_buckets=json.loads(props.get("width_buckets", "[]")), **meta)


def declared(props: dict) -> dict:
    """weights_sha256 and declared_version from an exported model's metadata (a file exported
    before either key existed: empty, and the version falls back to the file's own hash)."""
    return {"weights_sha256": json.loads(props.get("model_sha256", '""')),
            "declared_version": json.loads(props.get("model_version", '""'))}


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
                 task=task, meta={k: meta[k] for k in task.meta_keys if k in meta
                                   or k not in task.optional_meta_keys},
                 width_buckets=meta.get("width_buckets", []),  # prepare.width_buckets' list
                 letterbox=meta.get(LETTERBOX, False), **{k: meta[k] for k in RECIPE})


def task_and_meta(props: dict, path):
    """(task, preprocessing meta, task meta) from an exported model's metadata
    ({key: JSON string}), which the ONNX file and everything converted from it carry."""
    from stages.lib.params import DEFAULT_TASK
    from stages.tasks import get

    task = get(json.loads(props.get("task", json.dumps(DEFAULT_TASK))))
    missing = [k for k in (*task.meta_keys, *RECIPE) if k not in props
               and k not in task.optional_meta_keys]
    if missing:
        raise StageError(f"{path}: metadata lacks {', '.join(missing)}; export it with "
                         f"`python -m stages.export`.")
    return (task, {**{k: json.loads(props[k]) for k in RECIPE},
                   LETTERBOX: json.loads(props.get(LETTERBOX, "false"))},
            {k: json.loads(props[k]) for k in (*task.meta_keys, *task.decode_metadata)
             if k in props})


def load_openvino(path, threads: int = 0) -> Model:
    """The OpenVINO IR (model.xml beside model.bin) on OpenVINO's CPU plugin, in f32."""
    from stages.lib.model import formats

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
                 task=task, meta=task_meta, **declared(props), **meta)


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


def decode(model: Model, outputs: np.ndarray, k: int, sizes=None, views=()) -> list[dict]:
    """The predictions of a batch of model outputs, one dict per image: the model's task
    decodes them (classification: label, score = its softmax probability, and the k most
    probable classes as topk, best first). The one place outputs become predictions
    (predict's rows, serve's answers). views: the outputs of the task's test-time views of the
    same batch (Task.views), handed to its decode when there are any."""
    meta = {**model.meta, "image_size": model.image_size, "letterbox": model.letterbox,
            "source_sizes": sizes or [None] * len(outputs)}
    return model.task.decode(outputs, meta, k, **({"views": list(views)} if views else {}))


def run_views(model: Model, batch: np.ndarray) -> list:
    """The model's outputs on each of its task's test-time views of a stored batch (speech
    with a lexicon: views.py's four); [] for a task without views."""
    return [model.logits(f(batch)) for f in model.task.views(model.meta)]


def bucket_width(model: Model, source_size) -> int:
    """The input width an input of source_size runs at: the smallest of the model's
    width_buckets that holds it (the modality's bucket_width), else the largest bucket."""
    return model.modality.bucket_width(model.image_size, model.width_buckets, source_size)


def predict_batch(model: Model, images: list[np.ndarray], k: int,
                  views: bool = True) -> list[dict]:
    """The prediction of each uint8 HxWxC image, in order. A model with width_buckets runs
    each image at its bucket width (the fitted image cut there: fit pads a narrower line on
    the right, so the cut is what fitting it to the bucket width gives), one model call per
    width. views: also run its task's test-time views (what evaluate scores); False, the input
    alone (a bench's baseline)."""
    if not images:
        return []
    sizes = [getattr(img, "source_size", None) for img in images]  # original (w, h)
    if not model.width_buckets:
        batch = np.stack(images)
        return decode(model, model.logits(batch), k, sizes,
                      run_views(model, batch) if views else [])
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
    # no local path in the public card: a file's name, a registered model's path in its
    # repository (never the cache's); the registry's URL without userinfo, a local one left out
    out = {"backend": model.backend, "file": Path(str(model.path)).name, "version": model.version,
           "sha256": model.sha256, "weights_sha256": model.weights_sha256,
           "task": model.task.name,
           "classes": [str(c) for c in model.classes],
           "input": model.recipe,
           "provenance": model.info, "metrics": None}
    if model.registry:  # its own metrics (the tag message), not the working directory's
        from tools.registry.safety import public_facts

        out["registry"] = public_facts(model.registry)
        out["file"] = model.registry.get("path", out["file"])
        out["metrics"] = model.registry.get("metrics")
    elif metrics_path and Path(metrics_path).is_file():
        out["metrics"] = json.loads(Path(metrics_path).read_text())
    return out


def input_limit(model, max_pixels: int):
    """The limit a model's modality reads an input under: --max-pixels for images, the
    model's --max-seconds for sounds (its modality's LIMIT names which)."""
    return max_pixels if model.modality.LIMIT == "validate.max_pixels" else model.max_seconds
