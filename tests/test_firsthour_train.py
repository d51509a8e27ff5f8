"""Issue 17, item 9 (train): Ctrl-C says where it stopped and how to resume; train.keep picks
the weights of models/model.pt; train.device."""
import json

import pytest
import torch

from tests.conftest import run_stage
from tests.test_train_resume import make_tiny, train_stage


def state(path, key=None):
    blob = torch.load(path, map_location="cpu", weights_only=True)
    return blob[key] if key else blob["state_dict"]


def same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_ctrl_c_names_epoch_and_step_and_how_to_resume(tmp_path):
    root = make_tiny(tmp_path)
    proc = train_stage(root, PIPELINE_TEST_INTERRUPT_AT_STEP=9)  # SIGINT, as Ctrl-C sends
    assert proc.returncode == 130, proc.stderr
    assert ("train: interrupted at epoch 2 step 9; run `dvc repro` to resume from the last "
            "checkpoint (models/checkpoints/last.pt: written every epoch and every 4 steps)"
            in proc.stderr)
    assert "Aborted!" not in proc.stderr and "Traceback" not in proc.stderr
    assert json.loads((root / "logs/train.json").read_text())["status"] == "interrupted"
    resumed = train_stage(root)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from models/checkpoints/last.pt" in resumed.stdout


@pytest.mark.parametrize("keep", ["last", "best"])
def test_keep_decides_which_weights_become_model_pt(tmp_path, keep):
    # val_loss and a high lr: the best epoch is rarely the last; both cases are asserted
    root = make_tiny(tmp_path, {"keep": keep, "device": "cpu", "best_metric": "val_loss",
                                "lr": 0.3, "epochs": 4})
    proc = train_stage(root)
    assert proc.returncode == 0, proc.stderr
    model = state(root / "models/model.pt")
    chosen = state(root / f"models/checkpoints/{keep}.pt", "model")
    assert same(model, chosen)
    metrics = json.loads((root / "metrics/train.json").read_text())
    assert metrics.get("kept") == ("best" if keep == "best" else None)
    epoch = metrics["best_epoch"] if keep == "best" else 4
    assert f"train: the {keep} epoch, {epoch}: val acc" in proc.stdout
    assert f"-> models/model.pt (train.keep: {keep})" in proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_device_cuda_without_a_gpu_is_one_line(tmp_path):
    root = make_tiny(tmp_path, {"device": "cuda:1"})
    proc = run_stage("train", cwd=root)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: train.device is cuda:1 but no CUDA "
                                                   "GPU is visible"), proc.stderr


def test_bad_device_values_are_named(tmp_path):
    from stages.lib.io import StageError
    from stages.lib.params import load

    for value, error in (("gpu", "must be auto, cpu, cuda or cuda:N"),
                         ("cuda:x", "must be auto, cpu, cuda or cuda:N")):
        (tmp_path / "params.yaml").write_text(f"train: {{device: '{value}'}}\n")
        with pytest.raises(StageError, match=error):
            load("train", tmp_path / "params.yaml")
    (tmp_path / "params.yaml").write_text("train: {device: 'cuda:0', nproc: 2}\n")
    with pytest.raises(StageError, match="names one GPU"):
        load("train", tmp_path / "params.yaml")
