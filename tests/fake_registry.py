"""A tiny model registry in a real git repository, without a pipeline run (issue 39, items 4
and 5): two artifacts, `detector` and `ocr`, each a tiny classification ONNX graph written
with onnx's helper (no torch), produced by a `cp` stage of dvc.yaml so dvc.lock records its
md5, pushed to a directory remote, registered and assigned with GTO.

Each version's model answers one fixed label whatever the image (its logits are a constant
bias), so an answer's label says which version computed it: LABELS[(artifact, version)].
"""
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np

CLASSES = ["a", "b", "c"]
LABELS = {("detector", "v0.1.0"): "a", ("ocr", "v0.1.0"): "b", ("ocr", "v0.2.0"): "c"}
DATA = {"detector": "d" * 32, "ocr": "0" * 32}  # the data version each tag message names


def write_onnx(path: Path, label: str) -> None:
    """An 8x8 grey classifier whose logits are a constant favouring label (metadata as the
    export stage writes it: task, input and classes)."""
    from onnx import TensorProto, helper, numpy_helper

    bias = np.zeros(len(CLASSES), np.float32)
    bias[CLASSES.index(label)] = 4.0
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["input"], ["flat"]),
         helper.make_node("MatMul", ["flat", "w"], ["mm"]),
         helper.make_node("Add", ["mm", "b"], ["logits"])],
        "fake", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", len(CLASSES)])],
        [numpy_helper.from_array(np.zeros((64, len(CLASSES)), np.float32), "w"),
         numpy_helper.from_array(bias, "b")])
    save(graph, path)


def save(graph, path: Path) -> None:
    """The graph as an opset-17 model with the export stage's metadata (task, input, classes),
    saved at path."""
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for key, value in {"task": "classification", "image_size": 8, "channels": 1,
                       "mean": [0.5], "std": [0.5], "classes": CLASSES}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, json.dumps(value)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def copy_repo(registry, tmp_path) -> Path:
    """A copy of a built registry's working repository, which a test may change."""
    import shutil

    return Path(shutil.copytree(registry.repo, tmp_path / "repo", symlinks=True))


def tiny_png(folder: Path) -> bytes:
    """The bytes of a 12x10 grey PNG written in folder (what the tests post)."""
    from tests.conftest import write_image

    write_image(folder / "x.png", size=(12, 10), seed=3)
    return (folder / "x.png").read_bytes()


def register(repo: Path, name: str, version: str) -> None:
    from gto.api import register as gto_register

    from tools.registry.message import compose

    facts = {"headline": "accuracy 1.0", "metrics": {"accuracy": 1.0}, "data": DATA[name],
             "split": "none", "kernels": "portable, 2 threads", "params": {}}
    gto_register(str(repo), name, ref="HEAD", version=version,
                 message=compose(name, version, facts))


def assign(repo: Path, name: str, version: str, stage: str = "prod") -> None:
    from gto.api import assign as gto_assign

    gto_assign(str(repo), name, stage, version=version)


def build(base: Path, onnx: Path | None = None) -> SimpleNamespace:
    """base/repo (the working repository: detector v0.1.0 and ocr v0.1.0 at prod, ocr v0.2.0
    registered), base/store (its DVC remote) and base/origin.git (a bare copy, tags pushed).
    onnx: an exported model every version is a copy of, instead of the fake graphs (then
    LABELS does not apply; bench/serve_models.py)."""
    import shutil

    from tools.project import dvc, git

    def write(path: Path, label: str) -> None:
        if onnx is None:
            return write_onnx(path, label)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(onnx, path)

    repo, store = base / "repo", base / "store"
    repo.mkdir(parents=True)
    store.mkdir()
    git(repo, "init", "-q")
    dvc(repo, "init", "-q")
    dvc(repo, "remote", "add", "-d", "store", str(store))
    (repo / "dvc.yaml").write_text(
        "stages:\n" + "".join(
            f"  {n}:\n    cmd: cp src/{n}.onnx models/{n}.onnx\n    deps: [src/{n}.onnx]\n"
            f"    outs: [models/{n}.onnx]\n" for n in ("detector", "ocr"))
        + "artifacts:\n" + "".join(
            f"  {n}:\n    path: models/{n}.onnx\n    type: model\n    labels: [classification]\n"
            for n in ("detector", "ocr")))
    (repo / "models").mkdir()
    write(repo / "src/detector.onnx", LABELS[("detector", "v0.1.0")])
    write(repo / "src/ocr.onnx", LABELS[("ocr", "v0.1.0")])
    commits = {}
    for version in ("v0.1.0", "v0.2.0"):
        if version == "v0.2.0":
            write(repo / "src/ocr.onnx", LABELS[("ocr", "v0.2.0")])
        dvc(repo, "repro", "-q")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"models {version}", "--allow-empty")
        dvc(repo, "push", "-q")
        for name in ("detector", "ocr") if version == "v0.1.0" else ("ocr",):
            register(repo, name, version)
        commits[version] = git(repo, "rev-parse", "HEAD").strip()
        if version == "v0.1.0":
            assign(repo, "detector", "v0.1.0")
            assign(repo, "ocr", "v0.1.0")
    git(base, "init", "-q", "--bare", "origin.git")
    git(repo, "push", "-q", str(base / "origin.git"), "HEAD", "--tags")
    return SimpleNamespace(repo=repo, store=store, origin=base / "origin.git", commits=commits)


def object_path(store: Path, digest: str) -> Path:
    return store / "files/md5" / digest[:2] / digest[2:]
