"""Core functions of train, evaluate and export on a tiny in-memory problem."""
import numpy as np
import pytest
import torch

from stages.lib.model.formats import onnx_bytes, onnx_runner, outputs
from stages.lib.model.models import save_model
from stages.lib.model.parity import compare
from stages.tasks import load_model
from stages.lib.params import Train
from stages.tasks.common.singlelabel.metrics import headline_metrics
from stages.tasks.classification.model import build_model
from stages.lib.train.augment import epoch_order
from stages.lib.train.determinism import set_deterministic
from stages.lib.train.loop import fit, setup
from stages.tasks import default_task

TASK = default_task()

META = {"classes": ["a", "b"], "image_size": 8, "channels": 1, "mean": [0.5], "std": [0.5]}


def train(p, x_train, y_train, x_val, y_val, meta, log=None, task=None):
    """Train in memory from scratch; return (model, history). `log(epoch, record)` per epoch.
    task: classification unless given."""
    set_deterministic(p.deterministic)
    run = setup(p, meta, task or default_task())
    on_epoch = (lambda rec, perf: log(rec["epoch"] - 1, rec)) if log else None
    fit(p, run, (x_train, y_train, x_val, y_val), on_epoch=on_epoch)
    if run.ema is not None:
        run.ema.copy_to(run.model)
    return run.model, run.state["history"]


def toy_data(n=64, seed=0):
    """Class b images are bright, class a dark: learnable in a few steps."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = rng.normal(0, 0.3, (n, 1, 8, 8)).astype(np.float32) + (y[:, None, None, None] * 2 - 1)
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.int64))


def test_epoch_order_is_a_pure_function_of_seed_and_epoch():
    assert torch.equal(epoch_order(50, 1, 3), epoch_order(50, 1, 3))
    assert not torch.equal(epoch_order(50, 1, 3), epoch_order(50, 1, 4))
    assert sorted(epoch_order(50, 1, 3).tolist()) == list(range(50))


def test_training_learns_and_is_bit_reproducible():
    x, y = toy_data()
    p = Train(epochs=3, batch_size=16, lr=0.01)
    m1, hist = train(p, x, y, x, y, META)
    m2, _ = train(p, x, y, x, y, META)
    assert hist[-1]["val_acc"] >= 0.9
    assert hist[-1]["train_loss"] < hist[0]["train_loss"]
    for (k, a), b in zip(m1.state_dict().items(), m2.state_dict().values(), strict=True):
        assert torch.equal(a, b), k


def test_model_file_round_trip(tmp_path):
    model = build_model("small_cnn", 2, 1).eval()
    save_model(tmp_path / "m.pt", model, {**META, "model": "small_cnn"})
    loaded, meta = load_model(tmp_path / "m.pt")
    x, _ = toy_data(4)
    assert meta["classes"] == ["a", "b"]
    assert torch.equal(model(x), loaded(x))


def test_torchvision_model_by_name_takes_grey_input():
    net = build_model("resnet18", 3, 1).eval()
    assert net(torch.zeros(2, 1, 32, 32)).shape == (2, 3)


def test_headline_metrics_match_hand_computed_values():
    y_true = [0, 0, 0, 1]
    y_pred = [0, 0, 1, 1]
    m = headline_metrics(y_true, y_pred)
    assert m["accuracy"] == pytest.approx(0.75)
    # class 0: P=1, R=2/3; class 1: P=1/2, R=1
    assert m["precision_macro"] == pytest.approx(0.75)
    assert m["recall_macro"] == pytest.approx((2 / 3 + 1) / 2)
    assert m["f1_macro"] == pytest.approx((0.8 + 2 / 3) / 2)


def test_onnx_export_agrees_and_parity_catches_a_different_model():
    import onnx

    model = build_model("small_cnn", 2, 1).eval()
    blob = onnx_bytes(model, META, default_task())
    proto = onnx.load_from_string(blob)
    assert [i.name for i in proto.graph.input] == ["input"]
    assert [o.name for o in proto.graph.output] == ["logits"]
    meta = {p.key: p.value for p in proto.metadata_props}
    assert meta["classes"] == '["a", "b"]'
    x = toy_data(70)[0].numpy()  # 70 > the batch of 64: the batch axis is dynamic
    reference = model(torch.from_numpy(x)).detach().numpy()
    assert compare(reference, outputs(onnx_runner(blob), x, 64), 1e-4, 0,
                   TASK)["abs"].max() < 1e-4
    torch.manual_seed(1)
    other = build_model("small_cnn", 2, 1).eval()
    diff_other = compare(other(torch.from_numpy(x)).detach().numpy(),
                         outputs(onnx_runner(blob), x, 64),
                         1e-4, 0, TASK)["abs"]
    assert diff_other.max() > 1e-3
