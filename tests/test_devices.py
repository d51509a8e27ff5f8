"""Every task on a GPU, checked on the CPU: the tensors a task builds follow its inputs' device,
its losses run under deterministic algorithms on any device, and train.deterministic's check
before the first step names an op that has no deterministic kernel.

CI has no GPU. torch's FakeTensorMode gives tensors that say they are on `cuda:0` without
one, and checks every op's devices as CUDA does: a tensor a task makes on the CPU (a
`torch.arange` with no device) then fails with the message a real GPU gives ("Expected all
tensors to be on the same device"). It runs forwards only: the autograd engine wants a real
CUDA device for a backward.
"""
import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from stages.lib.model.models import forward_loss
from stages.lib.params import Train
from stages.tasks import get

N = 2


def batch(task: str):
    """(meta, x, y) of a two-sample batch as train draws it, for each task's default model."""
    if task == "classification":
        return ({"classes": ["a", "b", "c"], "channels": 1, "image_size": 8},
                torch.randn(N, 1, 8, 8), torch.tensor([0, 2]))
    if task == "detection":
        y = torch.full((N, 3, 5), -1.0)  # [class, x1, y1, x2, y2], -1 pads
        y[0, 0] = torch.tensor([0, 4.0, 4, 30, 30])
        y[1, :2] = torch.tensor([[1, 10.0, 12, 40, 50], [0, 2.0, 2, 9, 9]])
        return ({"classes": ["a", "b"], "channels": 3, "image_size": 64},
                torch.randn(N, 3, 64, 64), y)
    if task == "segmentation":
        y = torch.randint(0, 3, (N, 32, 32), dtype=torch.uint8)
        y[0, :4] = 255  # ignored pixels
        return ({"classes": ["bg", "a", "b"], "channels": 3, "image_size": 32},
                torch.randn(N, 3, 32, 32), y)
    assert task == "ocr"
    y = torch.zeros(N, 9, dtype=torch.long)  # [length, codes...]
    y[0, :4] = torch.tensor([3, 1, 2, 3])
    y[1, :2] = torch.tensor([1, 2])
    return ({"charset": list("abc"), "channels": 1, "image_size": [32, 128]},
            torch.randn(N, 1, 32, 128), y)


TASKS = ("classification", "detection", "segmentation", "ocr")


class CtcShapes(TorchDispatchMode):
    """aten._ctc_loss has no fake kernel (its output's shape depends on the target lengths'
    values): under FakeTensorMode this gives its two outputs' shapes, after checking that its
    tensors share one device as the real kernel needs. Every other op goes on to the fake
    mode below, which checks devices itself."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._ctc_loss.Tensor:
            logp, targets, frames, lengths = args[:4]
            devices = {t.device for t in (logp, targets, frames, lengths)}
            assert len(devices) == 1, f"ctc_loss inputs on several devices: {devices}"
            t, n, _ = logp.shape
            longest = targets.shape[-1]
            return (logp.new_empty(n), logp.new_empty(n, t, 2 * longest + 1))
        return func(*args, **(kwargs or {}))


def on_fake_cuda(task_name: str, model_name: str | None = None):
    """The task's train-mode forward and loss, and its eval-mode forward (the in-graph decoding
    where the model has one), with the model and the batch on a fake cuda:0, under
    deterministic algorithms as train.deterministic (the default) sets them. Returns the
    loss's and the eval outputs' devices."""
    task = get(task_name)
    meta, x, y = batch(task_name)
    p = Train(model=model_name or task.models[0])
    torch.manual_seed(0)
    model = task.build_model(p.model, meta)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True), CtcShapes():
            model = model.to("cuda")
            xc, yc = x.to("cuda"), y.to("cuda")
            model.train()
            loss = forward_loss(model, xc, yc, task.loss, p)
            model.eval()
            out = model(xc)
            return loss.device, out.device
    finally:
        torch.use_deterministic_algorithms(before)


@pytest.mark.parametrize("task", TASKS)
def test_every_task_builds_its_tensors_on_its_inputs_device(task):
    loss_device, out_device = on_fake_cuda(task)
    assert loss_device == torch.device("cuda:0")
    assert out_device == torch.device("cuda:0")


def test_torchvision_detectors_pad_their_detections_on_the_device():
    """Their eval forward pads each image's detections to top_k rows (torchvision_detectors.py
    rows()): on the detections' device. (Their whole forward masks by value, which fake
    tensors cannot follow; torchvision places its own tensors.)"""
    from stages.tasks.detection.torchvision_detectors import rows

    with FakeTensorMode(allow_non_fake_inputs=True):
        found = {"boxes": torch.rand(3, 4).to("cuda"), "scores": torch.rand(3).to("cuda"),
                 "labels": torch.ones(3, dtype=torch.long).to("cuda")}
        padded = rows(found, 8)
    assert padded.device == torch.device("cuda:0") and tuple(padded.shape) == (8, 6)


def test_the_fake_device_catches_a_tensor_made_on_the_cpu():
    """The check above is not vacuous: a loss that builds its grid with a bare torch.arange,
    as detection's heatmap targets once did, fails under it with CUDA's own message."""
    def faulty_loss(outputs):
        grid = torch.arange(outputs.shape[-1], dtype=outputs.dtype)  # no device: the CPU
        return (outputs - grid).abs().mean()

    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        with FakeTensorMode(allow_non_fake_inputs=True):
            faulty_loss(torch.randn(2, 8).to("cuda"))


def test_segmentation_pixel_loss_is_cross_entropy_with_ignored_pixels():
    """The one-hot form (deterministic on CUDA) computes what F.cross_entropy does, gradient
    too, ignored pixels left out of both the sum and the count."""
    from stages.tasks.segmentation.transforms import IGNORE, loss, pixel_nll

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 9, 7, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 4, (3, 9, 7), generator=g)
    targets[0, :3] = IGNORE
    targets[2] = IGNORE  # one image wholly ignored
    ours = loss(logits, targets.to(torch.uint8))
    theirs = F.cross_entropy(logits, targets, ignore_index=IGNORE)
    assert torch.allclose(ours, theirs, rtol=1e-12, atol=0)
    grad_ours, = torch.autograd.grad(ours, logits)
    grad_theirs, = torch.autograd.grad(theirs, logits)
    assert torch.allclose(grad_ours, grad_theirs, rtol=1e-12, atol=1e-15)
    per_pixel = F.cross_entropy(logits, targets, ignore_index=IGNORE, reduction="none")
    assert torch.allclose(pixel_nll(logits, targets), per_pixel, rtol=1e-12, atol=0)
    assert pixel_nll(logits, targets)[2].abs().sum() == 0


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_ocr_ctc_loss_is_torchs(reduction):
    """The task's CTC (routed through the CPU on CUDA under deterministic algorithms) is
    F.ctc_loss over the log-softmax, lengths read from the targets' first column."""
    from stages.tasks.common.ctc import ctc_loss

    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 12, 5, generator=g, requires_grad=True)
    _, _, targets = batch("ocr")
    ours = ctc_loss(logits, targets, reduction)
    logp = logits.log_softmax(-1).transpose(0, 1)
    theirs = F.ctc_loss(logp, targets[:, 1:], torch.tensor([12, 12]), targets[:, 0],
                        reduction=reduction, zero_infinity=True)
    assert torch.equal(ours, theirs)


class PutModel(torch.nn.Module):
    """A model whose forward uses Tensor.put_ (accumulate=False), which torch refuses under
    deterministic algorithms on every device, the CPU included: a real op without a
    deterministic kernel, as RoIAlign's backward is on CUDA."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.norm = torch.nn.BatchNorm1d(2)

    def forward(self, x):
        out = self.norm(self.lin(x))
        out.put_(torch.tensor([0]), torch.tensor([1.0]))
        return out


def test_preflight_names_the_op_the_task_and_the_param():
    from stages.lib.train.determinism import preflight

    model = PutModel()
    torch.use_deterministic_algorithms(True)
    try:
        message = preflight(lambda: model(torch.randn(4, 3)).sum().backward(), lambda: None,
                            model, "detection", "fasterrcnn_mobilenet_v3_large_320_fpn",
                            "cuda:0")
    finally:
        torch.use_deterministic_algorithms(False)
    assert message.startswith("train: put_ has no deterministic kernel on cuda:0")
    assert "task detection" in message and "fasterrcnn_mobilenet_v3_large_320_fpn" in message
    assert "train.deterministic: false" in message and "train.device: cpu" in message


def test_preflight_leaves_weights_statistics_gradients_and_generators_as_they_were():
    from stages.lib.train.determinism import preflight

    torch.manual_seed(3)
    model = PutModel()
    model.lin.weight.grad = torch.full_like(model.lin.weight, 0.5)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()

    def step():  # a train step that moves BatchNorm's statistics and draws random numbers
        model.train()
        torch.nn.functional.dropout(model.lin(torch.randn(4, 3)), 0.5).sum().backward()

    assert preflight(step, lambda: None, model, "t", "m", "cuda:0") == ""
    after = model.state_dict()
    assert all(torch.equal(state[k], after[k]) for k in state)
    assert torch.equal(model.lin.weight.grad, torch.full_like(model.lin.weight, 0.5))
    assert model.lin.bias.grad is None
    assert torch.equal(torch.get_rng_state(), rng)


def test_preflight_lets_other_errors_through():
    from stages.lib.train.determinism import preflight

    def step():
        raise RuntimeError("CUDA out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        preflight(step, lambda: None, torch.nn.Linear(1, 1), "t", "m", "cuda:0")


def test_the_model_says_what_it_was_trained_with(trained_project):
    """model.pt, the ONNX metadata and the report's headline carry trained_on: "cpu" on every
    CPU (the kernel profile names the kernels), deterministic, the precision."""
    import json

    import onnx

    expected = {"device": "cpu", "deterministic": True, "precision": "fp32"}
    meta = torch.load(trained_project / "models/model.pt", weights_only=True)["meta"]
    assert meta["trained_on"] == expected
    onnx_model = onnx.load(trained_project / "models/model.onnx")
    props = {p.key: p.value for p in onnx_model.metadata_props}
    assert json.loads(props["trained_on"]) == expected
    page = (trained_project / "reports/run.html").read_text()
    assert "trained on<b>cpu, deterministic, fp32</b>" in page
    record = json.loads((trained_project / "logs/train.json").read_text())
    assert record["trained_on"] == expected
