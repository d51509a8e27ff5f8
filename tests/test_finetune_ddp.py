"""Issue 15: LoRA under DDP (torchrun, 2 processes on CPU, gloo), on test_train_resume's tiny
prepared dataset: the adapters train in both processes, rank 0 alone writes the adapter-only
checkpoint and the merged model.pt, and a kill -9 mid-run resumes to the same bytes as a run
that never stopped."""
import json

import torch

from tests.test_train_resume import make_tiny, outs, train_stage

LORA = {"nproc": 2, "epochs": 2, "threads": 1, "adapter": "lora", "lora_rank": 4}


def test_lora_under_torchrun_resumes_bit_identically(tmp_path):
    one = make_tiny(tmp_path / "one", LORA)
    proc = train_stage(one)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 processes under torchrun" in proc.stdout
    record = json.loads((one / "logs/train.json").read_text())
    assert record["world_size"] == 2 and record["status"] == "ok"
    metrics = json.loads((one / "metrics/train.json").read_text())
    assert metrics["params_trainable"] < metrics["params_total"]
    assert metrics["lora_merge_max_abs_diff"] < 1e-4
    ckpt = torch.load(one / "models/checkpoints/last.pt", map_location="cpu",
                      weights_only=False)
    assert any(".lora_A." in k for k in ckpt["model"])  # adapter-only: no frozen base weight
    assert not any(k.endswith(".base_layer.weight") for k in ckpt["model"])
    model = torch.load(one / "models/model.pt", map_location="cpu", weights_only=True)
    assert not any("lora" in k for k in model["state_dict"])  # merged: a plain model

    killed = make_tiny(tmp_path / "killed", LORA)
    assert train_stage(killed, PIPELINE_TEST_KILL_AT_STEP=5).returncode != 0
    assert (killed / "models/checkpoints/last.pt").exists()
    proc = train_stage(killed)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "resuming from models/checkpoints/last.pt" in proc.stdout
    assert outs(killed) == outs(one)
