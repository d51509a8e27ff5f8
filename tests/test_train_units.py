"""Train helpers in process: seeded augmentation, LR schedule, fingerprints, fine-tuning,
the OOM message, and every precision/optimizer knob on a toy problem."""
import dataclasses

import pytest
import torch
import yaml

from stages.lib.train import checkpoint as ck
from stages.lib.train.augment import EpochBatches, sample_seed
from stages.lib.modality.imageaug import augment
from stages.lib.io import StageError
from stages.lib.model.models import head_name, init_from, save_model
from stages.lib.params import Train
from stages.tasks.classification.model import build_model
from stages.lib.train.loop import lr_factor
from stages.train import oom_message
from stages.tasks import default_task
from tests.test_train_eval_export import META, toy_data, train

AUG = Train(aug_crop_scale=0.5, aug_hflip=0.5, aug_rotate=15.0, aug_jitter=0.2)


def test_augmentation_is_a_pure_function_of_seed_epoch_and_index():
    x = torch.randn(1, 8, 8)
    a = augment(x, AUG, sample_seed(0, 1, 5))
    assert torch.equal(a, augment(x, AUG, sample_seed(0, 1, 5)))
    assert not torch.equal(a, augment(x, AUG, sample_seed(0, 2, 5)))
    assert not torch.equal(a, augment(x, AUG, sample_seed(0, 1, 6)))
    assert a.shape == x.shape and torch.isfinite(a).all()


def test_a_batch_does_not_depend_on_which_other_batches_were_fetched():
    x, y = toy_data(20)
    order = torch.randperm(20, generator=torch.Generator().manual_seed(0))
    ds = EpochBatches(x, y, order, 8, AUG, 3, default_task())
    late = ds[2]
    assert [len(ds[b][0]) for b in range(len(ds))] == [8, 8, 4]
    assert all(torch.equal(a, b) for a, b in zip(late, ds[2], strict=True))
    assert torch.equal(EpochBatches(x, y, order, 8, Train(), 3, default_task())[0][1],
                       x[order[:8]])


def test_warmup_then_cosine():
    p = Train(epochs=10, warmup_epochs=2)
    assert [lr_factor(p, e) for e in (0, 1, 2)] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert lr_factor(p, 9) < lr_factor(p, 5) < 1
    assert lr_factor(Train(epochs=4), 0) == 1.0


def test_bad_choices_name_the_param(tmp_path):
    from stages.lib.params import load

    path = tmp_path / "params.yaml"
    for bad, key in (({"precision": "fp8"}, "train.precision"),
                     ({"optimizer": "adam"}, "train.optimizer"),
                     ({"batch_size": 1, "nproc": 2}, "train.nproc"),
                     ({"freeze_backbone": True}, "train.init_from")):
        path.write_text(yaml.safe_dump({"train": bad}))
        with pytest.raises(StageError, match=key.replace(".", r"\.")):
            load("train", path)


def test_fingerprint_mismatch_says_why(tmp_path):
    data = tmp_path / "x.npy"
    data.write_bytes(b"1")
    code = "a"  # the training code's hash (stages.lib.codedeps.code_hash)
    base = ck.fingerprint(dataclasses.asdict(Train()), [data], code)
    assert ck.mismatch(base, ck.fingerprint(dataclasses.asdict(Train()), [data], code)) == ""
    neutral = ck.fingerprint(dataclasses.asdict(Train(num_workers=4)), [data], code)
    assert ck.mismatch(base, neutral) == ""
    assert "train.lr changed (0.003 -> 0.1)" in ck.mismatch(
        base, ck.fingerprint(dataclasses.asdict(Train(lr=0.1)), [data], code))
    data.write_bytes(b"2")
    why = ck.mismatch(base, ck.fingerprint(dataclasses.asdict(Train()), [data], "b"))
    assert f"the data changed ({data})" in why and "training code changed" in why


def test_unreadable_checkpoint_means_a_fresh_start(tmp_path):
    (tmp_path / "last.pt").write_bytes(b"torn")
    ckpt, message = ck.resumable(tmp_path / "last.pt", {})
    assert ckpt is None and "cannot be read" in message and "starting fresh" in message


def test_init_from_reinitialises_a_different_head_and_can_freeze(tmp_path):
    torch.manual_seed(1)
    source = build_model("small_cnn", 3, 1)
    save_model(tmp_path / "model.pt", source, {**META, "classes": ["a", "b", "c"],
                                               "model": "small_cnn"})
    torch.manual_seed(2)
    model = build_model("small_cnn", 2, 1)
    report = init_from(model, tmp_path / "model.pt", freeze_backbone=True)
    head = head_name(model)
    assert report["reinitialised"] == [f"{head}.weight", f"{head}.bias"]
    assert report["missing"] == report["unexpected"] == []
    assert torch.equal(model.state_dict()["0.weight"], source.state_dict()["0.weight"])
    assert [n for n, q in model.named_parameters() if q.requires_grad] == report["reinitialised"]
    with pytest.raises(StageError, match="train.init_from"):
        init_from(build_model("small_cnn", 2, 1), tmp_path / "missing.pt")


def test_out_of_memory_message_names_batch_size_and_param():
    message = oom_message(Train(batch_size=512), "cuda:0")
    assert "train.batch_size=512" in message and "lower train.batch_size" in message


@pytest.mark.parametrize("knobs", [
    {"precision": "bf16"}, {"precision": "fp16", "grad_clip": 1.0},
    {"optimizer": "sgd", "label_smoothing": 0.1, "grad_accum_steps": 3, "warmup_epochs": 1},
    {"aug_crop_scale": 0.7, "aug_rotate": 10.0, "aug_jitter": 0.1},
])
def test_every_knob_trains_to_a_finite_loss(knobs):
    x, y = toy_data(48)
    model, history = train(Train(epochs=2, batch_size=8, lr=0.01, **knobs), x, y, x, y, META)
    assert len(history) == 2 and all(torch.isfinite(torch.tensor(h["train_loss"]))
                                     for h in history)


@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_non_finite_gradient_with_a_finite_loss_stops_before_the_step(clip):
    """A gradient that turns NaN while the loss stays finite is caught at the optimiser step
    (by the gradient sum, or by the clipping norm when clipping is on), naming every micro-batch
    accumulated into that step, and the step is not taken."""
    from stages.lib.train.loop import NonFinite, fit, setup

    x, y = toy_data(48)
    p = Train(epochs=1, batch_size=8, lr=0.01, grad_accum_steps=2, grad_clip=clip)
    run = setup(p, META, default_task())
    calls = []

    def poison(grad):  # the third micro-batch's gradient: the first of optimiser step 2
        calls.append(1)
        return grad * float("nan") if len(calls) == 3 else grad

    next(run.model.parameters()).register_hook(poison)
    after_step_1 = {}

    def keep(kind):
        after_step_1.update({k: v.detach().clone() for k, v in run.model.named_parameters()})

    with pytest.raises(NonFinite) as err:
        fit(dataclasses.replace(p, checkpoint_every_steps=1), run, (x, y, x, y),
            on_checkpoint=keep)
    info = err.value.info
    assert info["what"] == f"gradient {'norm' if clip else 'sum'} nan"
    assert (info["epoch"], info["step"], run.state["step"]) == (0, 2, 1)
    assert [len(i) for i in info["indices"]] == [8, 8]  # micro-batches 3 and 4
    assert after_step_1 and all(torch.equal(v, after_step_1[k])  # weights as after step 1
                                for k, v in run.model.named_parameters())
