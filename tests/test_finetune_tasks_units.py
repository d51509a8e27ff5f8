"""Issue 15 for every task (in process, no pipeline run): detection, segmentation, OCR, audio
and speech models take train.init_from's report by name with the task's head (Task.head)
re-initialised on a class-count change, freeze_backbone and lr_backbone split the model at that
head, and LoRA on the task's default targets (Task.lora_targets) trains, merges into a plain
model that computes the same outputs, and skips what peft cannot merge."""
import dataclasses
from pathlib import Path

import pytest
import torch

from stages.lib.train import finetune
from stages.lib.model.models import init_from, save_model
from stages.lib.params import load
from stages.tasks import get

ROOT = Path(__file__).resolve().parent.parent
AUDIO_SPEC = {"sample_rate": 16000, "n_fft": 512, "hop": 160, "n_mels": 40, "frames": 101}

# (task, model, meta with n classes, meta with one more, input shape, the head's last layer)
CASES = {
    "detection": ("centernet_small", {"classes": ["a", "b"], "channels": 3, "image_size": 64},
                  {"classes": ["a", "b", "c"], "channels": 3, "image_size": 64}, (2, 3, 64, 64),
                  "head.1"),
    "segmentation": ("unet", {"classes": ["bg", "a"], "channels": 3},
                     {"classes": ["bg", "a", "b"], "channels": 3}, (2, 3, 32, 32), "head"),
    "ocr": ("crnn", {"charset": "abc", "channels": 1, "image_size": [32, 64]},
            {"charset": "abcd", "channels": 1, "image_size": [32, 64]}, (2, 1, 32, 64),
            "head"),
    "audio": ("audio_cnn", {"classes": ["no", "yes"], "channels": 1, "image_size": AUDIO_SPEC},
              {"classes": ["no", "up", "yes"], "channels": 1, "image_size": AUDIO_SPEC},
              (2, 1, 40, 101), "15"),
    "speech": ("cnn_bigru", {"charset": "ab ", "channels": 1, "image_size": AUDIO_SPEC},
               {"charset": "abc ", "channels": 1, "image_size": AUDIO_SPEC}, (2, 1, 40, 101),
               "head"),
}


def build(task, name, meta, seed=0):
    torch.manual_seed(seed)
    return get(task).build_model(name, meta)


def raw_outputs(task, model, x):
    """The model's outputs before any decoding, in eval mode (detection: its raw maps)."""
    model.eval()
    with torch.no_grad():
        inner = getattr(model, "base_model", None)
        net = inner.model if inner is not None else model
        return net.maps(x) if task == "detection" else net(x)


@pytest.mark.parametrize("task", sorted(CASES))
def test_init_from_reinitialises_the_task_head_on_a_class_change(task, tmp_path):
    name, meta, grown, _, last = CASES[task]
    old = build(task, name, meta, seed=1)
    save_model(tmp_path / "model.pt", old, {**meta, "model": name, "task": task})
    new = build(task, name, grown)
    fresh = {k: v.clone() for k, v in new.state_dict().items()}
    head = get(task).head(new)
    report = init_from(new, tmp_path / "model.pt", strict=True, head=head)  # a head may differ
    assert report["kind"] == "model.pt"
    assert report["reinitialised"] == [f"{last}.weight", f"{last}.bias"]
    assert report["missing"] == [] and report["unexpected"] == []
    assert len(report["loaded"]) == len(fresh) - 2
    state, before = new.state_dict(), old.state_dict()
    for k in report["loaded"]:
        assert torch.equal(state[k], before[k]), k
    for k in report["reinitialised"]:  # kept the seeded initialisation
        assert torch.equal(state[k], fresh[k]), k


@pytest.mark.parametrize("task", sorted(CASES))
def test_lora_on_the_task_model_trains_adapters_and_merges_exactly(task):
    name, meta, _, shape, _ = CASES[task]
    t = get(task)
    p = dataclasses.replace(load("train", ROOT / "params.yaml"), model=name, adapter="lora")
    model = build(task, name, meta)
    head = t.head(model)
    base = {n: q.clone() for n, q in model.named_parameters() if not n.startswith(head + ".")}
    model, facts, _ = finetune.setup_model(model, p, head, t.lora_targets(model))
    assert facts["lora_targets"] > 0
    assert facts["params_trainable"] < 0.2 * facts["params_total"]
    adapted = {n for n, m in model.named_modules() if hasattr(m, "lora_A")}
    for n in adapted:  # nothing peft cannot merge exactly
        conv = m = model.get_submodule(n).base_layer
        assert isinstance(m, (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d)), n
        if not isinstance(m, torch.nn.Linear):
            assert conv.groups == 1 and set(conv.dilation) == {1}, n
        assert not finetune.plain_name(n).startswith(head), n
    opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=0.05)
    x = torch.randn(*shape)
    model.train()
    for _ in range(2):  # lora_B starts at zero: two steps make every adapter count
        out = model(x)
        out.float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    for n, q in model.named_parameters():  # the base weights did not move
        plain = finetune.plain_name(n).replace(".base_layer", "")
        if plain in base:
            assert torch.equal(q, base[plain]) or q.requires_grad, n
    before = raw_outputs(task, model, x)
    plain, _ = finetune.merged(model, p)
    assert not any("lora_" in k for k in plain.state_dict())
    after = raw_outputs(task, plain, x)
    assert (after - before).abs().max() < 1e-4 * (1 + before.abs().max())
    rebuilt = build(task, name, meta)
    rebuilt.load_state_dict(plain.state_dict())  # a plain model of the task's architecture


def test_ocr_dilated_convolutions_are_left_out():
    t = get("ocr")
    model = build("ocr", *CASES["ocr"][:2])
    names = finetune.lora_candidates(model, t.head(model))
    dilated = [n for n, m in model.named_modules()
               if isinstance(m, torch.nn.Conv1d) and m.dilation != (1,)]
    assert dilated and not set(dilated) & set(names)
    assert "encoder.0" in names and "features.0" in names


@pytest.mark.parametrize("task", sorted(CASES))
def test_freeze_backbone_and_lr_backbone_follow_the_task_head(task, tmp_path):
    name, meta, _, _, _ = CASES[task]
    t = get(task)
    save_model(tmp_path / "model.pt", build(task, name, meta), {**meta, "model": name})
    p = dataclasses.replace(load("train", ROOT / "params.yaml"), model=name,
                            init_from=str(tmp_path / "model.pt"), freeze_backbone=True)
    model = build(task, name, meta)
    head = t.head(model)
    model, facts, _ = finetune.setup_model(model, p, head)
    assert facts["init"]["reinitialised"] == []
    trainable = [n for n, q in model.named_parameters() if q.requires_grad]
    assert trainable and all(n.startswith(head + ".") for n in trainable)

    p = dataclasses.replace(p, freeze_backbone=False, lr_backbone=0.0001)
    model = build(task, name, meta)
    model, _, _ = finetune.setup_model(model, p, head)
    fast, slow = finetune.param_groups(model, p, head)
    names = {id(q): n for n, q in model.named_parameters()}
    assert fast["lr"] == p.lr and slow["lr"] == 0.0001
    assert all(names[id(q)].startswith(head + ".") for q in fast["params"])
    assert not any(names[id(q)].startswith(head + ".") for q in slow["params"])
    assert len(fast["params"]) + len(slow["params"]) == len(names)
