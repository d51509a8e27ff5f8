"""Issue 15: LoRA on a torchvision ResNet-18 (random init, from a local file) as the train stage
runs it: at most 10% of the parameters train, the checkpoint holds only the adapters (+ head,
BatchNorm, buffers), a resume after SIGKILL ends with the same bytes, export merges the adapters
into a plain ONNX graph that passes the parity gate, and TensorBoard events read back."""
import json
import shutil

import pytest
import torch

from tests.conftest import copy_run, run_stage
from tools.project import set_params

pytestmark = pytest.mark.e2e

LORA = {"train.model": "resnet18", "train.init_from": "weights/resnet18.pt",
        "train.adapter": "lora", "train.epochs": 1, "train.batch_size": 32,
        "train.checkpoint_every_steps": 2, "train.tensorboard": True}


def lora_copy(trained_project, dest):
    project = copy_run(trained_project, dest)
    torch.manual_seed(0)
    import torchvision

    torch.save(torchvision.models.resnet18().state_dict(), project / "weights/resnet18.pt")
    set_params(project, LORA)
    return project


def train(project, kill_at=None):
    import os

    from stages.lib.hooks import env_name

    if kill_at:
        os.environ[env_name("KILL_AT_STEP")] = str(kill_at)
    try:
        return run_stage("train", cwd=project)
    finally:
        os.environ.pop(env_name("KILL_AT_STEP"), None)


@pytest.fixture(scope="module")
def lora_run(trained_project, tmp_path_factory):
    project = lora_copy(trained_project, tmp_path_factory.mktemp("lora") / "project")
    proc = train(project)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return project


def test_lora_trains_few_parameters_and_exports_a_merged_plain_graph(lora_run):
    metrics = json.loads((lora_run / "metrics/train.json").read_text())
    assert 0 < metrics["params_trainable"] <= 0.10 * metrics["params_total"]
    assert metrics["init"]["reinitialised"] == ["1.fc.weight", "1.fc.bias"]
    assert metrics["lora_merge_max_abs_diff"] < 1e-4
    blob = torch.load(lora_run / "models/model.pt", weights_only=True)
    assert not any("lora" in k or "base_layer" in k for k in blob["state_dict"])  # merged
    ckpt = torch.load(lora_run / "models/checkpoints/last.pt", weights_only=True)
    assert any(".lora_A." in k for k in ckpt["model"])
    assert not any(k.endswith("base_layer.weight") for k in ckpt["model"])  # frozen base left out
    assert (lora_run / "models/checkpoints/last.pt").stat().st_size < \
        0.25 * (lora_run / "models/model.pt").stat().st_size
    proc = run_stage("export", cwd=lora_run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    export = json.loads((lora_run / "metrics/export.json").read_text())
    assert export["top1_agreement"] == 1.0 and export["samples"] > 0  # the gate passed
    import onnx

    graph = onnx.load(str(lora_run / "models/model.onnx")).graph
    assert not any("lora" in n.name.lower() for n in graph.node)
    assert not any("lora" in i.name.lower() for i in graph.initializer)


def test_lora_resume_after_kill_is_bit_identical(lora_run, trained_project, tmp_path):
    project = lora_copy(trained_project, tmp_path / "project")
    killed = train(project, kill_at=3)
    assert killed.returncode == -9
    resumed = train(project)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from models/checkpoints/last.pt" in resumed.stdout
    for out in ("models/model.pt", "metrics/train.json"):
        assert (project / out).read_bytes() == (lora_run / out).read_bytes(), out
    # last.pt: the same tensors (its pickle's bytes may differ: object sharing after a resume)
    a, b = (torch.load(root / "models/checkpoints/last.pt", weights_only=True)
            for root in (project, lora_run))
    assert a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    # TensorBoard: every optimiser step once (the killed run's later events purged), per epoch
    # the validation metric, throughput and memory
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(project / "logs/tensorboard")).Reload()
    steps = [e.step for e in events.Scalars("train/loss")]
    epochs = json.loads((project / "metrics/train.json").read_text())["epochs"]
    assert steps == sorted(set(steps)) == list(range(1, steps[-1] + 1))
    assert len(events.Scalars("val/acc")) == epochs
    assert {"lr", "perf/samples_per_s", "perf/peak_memory_bytes"} <= set(events.Tags()["scalars"])
    shutil.rmtree(project)
