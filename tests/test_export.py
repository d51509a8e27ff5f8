"""export: the parity gate, the ONNX file's metadata, a torch-free consumer, the test hook."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml

from stages.lib.hooks import env_name
from stages.lib.model.parity import parity_gate
from stages.tasks import default_task
from tests.conftest import ROOT, run_stage
from tests.fake_model_project import CLASSES, make_fake_project, read_rows

MEAN_SHIFT_ENV = env_name("EXPORT_MEAN_SHIFT")
TASK = default_task()
ABC = ["a", "b", "c"]

# A consumer that has only the .onnx file: onnxruntime, numpy and Pillow, never torch and
# nothing from this project. Preprocessing comes from the file's metadata alone.
CONSUMER = r"""
import json, sys
import numpy as np
import onnxruntime as ort
from PIL import Image

model, images = sys.argv[1], sys.argv[2:]
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
meta = {k: json.loads(v) for k, v in session.get_modelmeta().custom_metadata_map.items()}
size, channels = meta["image_size"], meta["channels"]
batch = []
for path in images:
    with Image.open(path) as img:
        img = img.convert("L" if channels == 1 else "RGB").resize((size, size),
                                                                 Image.Resampling.BILINEAR)
        x = np.asarray(img, dtype=np.float32).reshape(size, size, channels) / 255.0
    x = (x - np.asarray(meta["mean"], np.float32)) / np.asarray(meta["std"], np.float32)
    batch.append(x.transpose(2, 0, 1))
logits = session.run(["logits"], {"input": np.stack(batch).astype(np.float32)})[0]
heavy = sorted(m for m in ("torch", "torchvision", "stages") if m in sys.modules)
print(json.dumps({"top1": [meta["classes"][i] for i in logits.argmax(1)], "heavy": heavy}))
"""


def consume(onnx_path, images) -> dict:
    """Run CONSUMER in a fresh interpreter outside the project (so `stages` is not importable)."""
    proc = subprocess.run([sys.executable, "-c", CONSUMER, str(onnx_path), *map(str, images)],
                          capture_output=True, text=True, cwd=os.path.dirname(onnx_path),
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def torch_top1(model_path, images) -> list[str]:
    """PyTorch's top-1 through the project's own preprocessing (stages.lib.modality.imagecore)."""
    from stages.lib.modality.imagecore import load_image, normalize
    from stages.lib.model.models import predict_outputs
    from stages.tasks import load_model

    model, meta = load_model(model_path)
    raw = np.stack([load_image(p, meta["image_size"], meta["channels"]) for p in images])
    logits = predict_outputs(model, normalize(raw, meta["mean"], meta["std"]))
    return [meta["classes"][i] for i in logits.argmax(1)]


def test_parity_gate_by_hand():
    ref = np.array([[1.0, -2.0], [4.0, 0.0], [0.5, 0.4]])
    same = parity_gate(ref, {1: ref.copy(), 8: ref.copy()}, 1e-4, 1e-4, ABC, "X", TASK)
    assert same == ({"max_abs_diff": 0.0, "max_rel_diff": 0.0, "top1_agreement": 1.0,
                     "batch_sizes": [1, 8], "samples": 3}, "")
    off = ref + np.array([[0.0, 0.0], [0.02, 0.0], [0.0, 0.0]])  # image b: 0.02 = 0.5% of 4
    metrics, error = parity_gate(ref, {1: ref, 8: off}, 0.01, 0.0, ABC, "X", TASK)
    assert metrics["max_abs_diff"] == pytest.approx(0.02)
    assert metrics["max_rel_diff"] == pytest.approx(0.005)
    assert metrics["top1_agreement"] == 1.0
    assert "Worst image: b (batch size 8" in error and "1 of 3" in error
    # within atol + rtol * max|logit| = 0.01 + 0.01 * 4: passes
    assert parity_gate(ref, {8: off}, 0.01, 0.01, ABC, "X", TASK)[1] == ""
    # a top-1 flip is worse than any bigger difference elsewhere, even within tolerance
    flip = ref + np.array([[0.0, 0.0], [0.5, 0.0], [0.0, 0.11]])
    metrics, error = parity_gate(ref, {8: flip}, 1.0, 0.0, ABC, "X", TASK)
    assert metrics["top1_agreement"] == pytest.approx(2 / 3)
    assert "Worst image: c" in error and "top-1 0 in PyTorch vs top-1 1 in X" in error


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    """A fake post-train project, exported once with default params."""
    root = make_fake_project(tmp_path_factory.mktemp("export") / "project")
    proc = run_stage("export", cwd=root)
    assert proc.returncode == 0, proc.stderr
    return root


def test_onnx_file_is_checked_self_contained_and_carries_preprocessing_and_provenance(fake):
    import onnx

    proto = onnx.load(str(fake / "models/model.onnx"))
    onnx.checker.check_model(proto, full_check=True)
    assert not list(fake.glob("models/*.data"))  # weights are inside the one file
    assert [i.name for i in proto.graph.input] == ["input"]
    assert [o.name for o in proto.graph.output] == ["logits"]
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param  # dynamic batch
    meta = {p.key: json.loads(p.value) for p in proto.metadata_props}
    assert meta["classes"] == CLASSES and meta["image_size"] == 8 and meta["channels"] == 1
    assert meta["mean"] == [0.5] and meta["std"] == [0.5]
    from stages.lib.io import sha256_file

    assert meta["manifest_sha256"] == sha256_file(fake / "data/manifest.csv")
    assert meta["model_sha256"] == sha256_file(fake / "models/model.pt")
    assert all(len(meta[k]) == 64 for k in ("code_sha256", "params_sha256"))
    assert "git_commit" not in meta and str(fake) not in str(meta)
    record = json.loads((fake / "logs/export.json").read_text())
    assert "git_commit" in record and record["provenance"]["model_sha256"] == meta["model_sha256"]
    metrics = json.loads((fake / "metrics/export.json").read_text())
    assert metrics["batch_sizes"] == [1, 64] and metrics["samples"] == 12
    assert metrics["top1_agreement"] == 1.0 and metrics["parity"] == "passed"
    assert "max_abs_diff" not in metrics  # it changes per CPU: the run record holds it
    assert record["metrics"]["max_abs_diff"] <= metrics["atol"]
    assert metrics["torchscript"] == {"enabled": False}
    assert [f.name for f in (fake / "models/torchscript").iterdir()] == ["DISABLED.txt"]


def test_onnxruntime_alone_gets_pytorchs_top1_from_the_metadata(fake):
    """Acceptance 3: no torch import, no project code, only the .onnx file and the images."""
    images = sorted((fake / "data/source").rglob("*.png"))
    got = consume(fake / "models/model.onnx", images)
    assert got["heavy"] == []
    assert got["top1"] == torch_top1(fake / "models/model.pt", images)


def test_params_change_the_provenance_hash_not_the_commit(fake, tmp_path):
    import onnx

    root = shutil.copytree(fake, tmp_path / "copy")
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["export"].update(parity_samples=5, torchscript=True)  # TorchScript, same gate
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    proc = run_stage("export", cwd=root)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((root / "metrics/export.json").read_text())
    assert metrics["samples"] == 5
    assert metrics["torchscript"]["enabled"] is True
    assert metrics["torchscript"]["top1_agreement"] == 1.0
    assert (root / "models/torchscript/model.pt").stat().st_size > 1000

    def meta(path):
        return {p.key: p.value for p in onnx.load(str(path)).metadata_props}

    before, after = meta(fake / "models/model.onnx"), meta(root / "models/model.onnx")
    assert before["params_sha256"] != after["params_sha256"]
    assert before["model_sha256"] == after["model_sha256"]


def test_broken_normalisation_fails_the_stage_naming_an_image(fake, tmp_path):
    """Acceptance 2: the test hook exports a graph that normalises with a different mean."""
    root = shutil.copytree(fake, tmp_path / "copy")
    (root / "models/model.onnx").unlink()
    env = {**os.environ, "PYTHONPATH": str(ROOT), MEAN_SHIFT_ENV: "0.5"}
    proc = subprocess.run([sys.executable, "-m", "stages.export"], cwd=root, env=env,
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    paths = [r["path"] for r in read_rows(root / "data/split/test.csv")]
    named = [p for p in paths if f"Worst image: {p} " in proc.stderr]
    assert len(named) == 1, proc.stderr
    assert "ONNX (onnxruntime) disagrees with PyTorch" in proc.stderr
    assert not (root / "models/model.onnx").exists()
    assert json.loads((root / "logs/export.json").read_text())["passed"] is False


def test_bad_param_is_named(tmp_path):
    (tmp_path / "params.yaml").write_text("export:\n  parity_batch: 0\n")
    proc = run_stage("export", cwd=tmp_path)
    assert proc.returncode != 0 and "export.parity_batch" in proc.stderr
