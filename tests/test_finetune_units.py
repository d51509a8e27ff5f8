"""Issue 15, in process: train.init_from's formats and report, init_strict, train.freeze,
train.lr_backbone, LoRA's targets, trainable counts and adapter-only checkpoints."""
import dataclasses
import subprocess
import sys

import pytest
import torch
import torchvision

from stages.lib.train import finetune
from stages.lib.io import StageError
from stages.lib.model.models import init_from, save_model
from stages.lib.params import Train
from stages.tasks import default_task
from stages.tasks.classification.model import build_model
from stages.lib.train.checkpoint import checkpoint, restore
from stages.lib.train.loop import setup

META = {"classes": [str(i) for i in range(10)], "image_size": 16, "channels": 1,
        "mean": [0.5], "std": [0.5]}


@pytest.fixture(scope="module")
def resnet_file(tmp_path_factory):
    """A torchvision-style state dict: resnet18 with 1000 classes, random init, RGB names."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("weights") / "resnet18.pt"
    torch.save(torchvision.models.resnet18().state_dict(), path)
    return path


def test_torchvision_state_dict_loads_into_the_grey_wrapper_head_reinitialised(resnet_file):
    model = build_model("resnet18", 10, 1)  # Sequential(RepeatChannels, resnet18): "1." names
    report = init_from(model, resnet_file, head="1.fc")
    assert report["kind"] == "state dict"
    assert report["reinitialised"] == ["1.fc.weight", "1.fc.bias"]
    assert report["missing"] == report["unexpected"] == []
    assert len(report["loaded"]) == len(model.state_dict()) - 2
    source = torch.load(resnet_file, weights_only=True)
    assert torch.equal(model.state_dict()["1.layer4.1.conv2.weight"],
                       source["layer4.1.conv2.weight"])


def test_timm_ddp_and_checkpoint_layouts_and_strict(resnet_file, tmp_path):
    source = torch.load(resnet_file, weights_only=True)
    del source["layer1.0.bn1.running_mean"]
    source["extra.weight"] = torch.zeros(1)
    timm = tmp_path / "timm.pt"
    torch.save({"state_dict": {f"module.{k}": v for k, v in source.items()}}, timm)
    report = init_from(build_model("resnet18", 10, 1), timm, head="1.fc")
    assert report["missing"] == ["1.layer1.0.bn1.running_mean"]
    assert report["unexpected"] == ["1.extra.weight"]
    with pytest.raises(StageError, match=r"init_strict.*1 missing \(1\.layer1\.0\.bn1\.running_mean"
                                         r"\), 1 unexpected \(1\.extra\.weight\)"):
        init_from(build_model("resnet18", 10, 1), timm, strict=True, head="1.fc")
    ckpt = tmp_path / "last.pt"
    torch.save({"model": build_model("small_cnn", 5, 1).state_dict(), "fingerprint": {}}, ckpt)
    report = init_from(build_model("small_cnn", 10, 1), ckpt, strict=True)  # head: allowed
    assert report["kind"] == "checkpoint" and report["reinitialised"] == ["13.weight", "13.bias"]
    with pytest.raises(StageError, match="does not fit train.model"):
        init_from(build_model("small_cnn", 10, 1), resnet_file)


def test_five_class_model_into_ten_classes_reports_only_the_head(tmp_path):
    save_model(tmp_path / "model.pt", build_model("small_cnn", 5, 1),
               {**META, "classes": list("abcde"), "model": "small_cnn"})
    p = Train(init_from=str(tmp_path / "model.pt"), epochs=1)
    run = setup(p, META, default_task())
    init = run.facts["init"]
    assert init["kind"] == "model.pt" and init["reinitialised"] == ["13.weight", "13.bias"]
    assert len(init["loaded"]) == len(run.model.state_dict()) - 2


def test_freeze_patterns_and_discriminative_lr(resnet_file):
    p = Train(model="resnet18", init_from=str(resnet_file), freeze=["1.conv1", "1.layer1"],
              lr_backbone=0.0001)
    run = setup(p, META, default_task())
    frozen = {n for n, q in run.model.named_parameters() if not q.requires_grad}
    assert "1.conv1.weight" in frozen and "1.layer1.1.bn2.bias" in frozen
    assert not any(n.startswith(("1.layer2", "1.fc")) for n in frozen)
    groups = run.opt.param_groups
    assert [g["lr"] for g in groups] == [p.lr, 0.0001]
    assert [id(q) for q in groups[0]["params"]] == [id(q) for q in run.model[1].fc.parameters()]
    with pytest.raises(StageError, match=r"train\.freeze: layer9 match"):
        setup(dataclasses.replace(p, freeze=["layer9"]), META, default_task())
    backbone = setup(Train(init_from=str(resnet_file), model="resnet18", freeze_backbone=True),
                     META, default_task()).model
    assert [n for n, q in backbone.named_parameters() if q.requires_grad] == ["1.fc.weight",
                                                                              "1.fc.bias"]


def test_lora_targets_skip_grouped_convs_and_the_head():
    from torch import nn

    net = nn.Sequential(nn.Conv2d(1, 8, 3), nn.Conv2d(8, 8, 3, groups=8), nn.Conv2d(8, 8, 1),
                        nn.Flatten(), nn.Linear(8, 4), nn.Linear(4, 2))
    assert finetune.lora_candidates(net, "5") == ["0", "2", "4"]


def test_lora_trains_adapters_and_head_and_checkpoints_only_them(resnet_file):
    p = Train(model="resnet18", init_from=str(resnet_file), adapter="lora", epochs=1)
    run = setup(p, META, default_task())
    facts = run.facts
    assert 0 < facts["params_trainable"] <= 0.1 * facts["params_total"]
    trainable = [n for n, q in run.model.named_parameters() if q.requires_grad]
    assert all(".lora_" in n or ".fc." in n or ".bn" in n or "downsample.1" in n
               for n in trainable)
    assert any(".fc." in n for n in trainable) and any("conv1.lora_A" in n for n in trainable)
    state = checkpoint(run, p, {})["model"]
    full = run.model.state_dict()
    assert set(state) < set(full) and not any(k.endswith("base_layer.weight") for k in state)
    assert sum(v.numel() for v in state.values()) < 0.1 * sum(v.numel() for v in full.values())
    other = setup(p, META, default_task())  # the same frozen base from seed + init_from
    with torch.no_grad():
        for q in run.model.parameters():
            if q.requires_grad:
                q.add_(0.01)
    restore(other, checkpoint(run, p, {}))
    assert all(torch.equal(a, b) for a, b in zip(other.model.state_dict().values(),
                                                 run.model.state_dict().values(),
                                                 strict=True))
    frozen = setup(dataclasses.replace(p, lora_batchnorm="frozen"), META, default_task())
    assert frozen.eval_modules and not any(
        q.requires_grad for m in frozen.eval_modules for q in m.parameters())
    x = torch.randn(4, 1, 16, 16)
    plain, diff = finetune.merged(run.model, p, x)
    assert type(plain) is torch.nn.Sequential and diff < 1e-4
    assert not any("lora" in k for k in plain.state_dict())


def test_peft_imports_and_wraps_without_the_network():
    code = ("import socket\n"
            "def no(*a, **k): raise OSError('network used')\n"
            "socket.socket.connect = no; socket.create_connection = no\n"
            "socket.getaddrinfo = no\n"
            "import torch; from peft import LoraConfig, get_peft_model\n"
            "m = get_peft_model(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)),"
            " LoraConfig(r=2, target_modules=['0']))\n"
            "print(m(torch.zeros(1, 4)).shape)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "torch.Size([1, 2])" in proc.stdout
