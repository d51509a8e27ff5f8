"""Issue 13, the queue: evaluate and export take their share of the cores under a queue, like
train, and keep the libraries' own thread counts when they run alone."""
import os
import subprocess
import sys

from tests.conftest import ROOT

PROBE = ("import torch; default = torch.get_num_threads(); "
         "from stages.lib.train.cores import stage_threads; n = stage_threads(); "
         "print(default, n, torch.get_num_threads())")


def probe(**env) -> list[int]:
    environ = {k: v for k, v in os.environ.items() if k != "TRAIN_CONCURRENT_JOBS"}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env={**environ, "PYTHONPATH": str(ROOT), **env}, check=True)
    return [int(v) for v in proc.stdout.split()]


def test_alone_the_stage_keeps_the_default_threads():
    default, threads, now = probe()
    assert threads == 0 and now == default


def test_under_a_queue_of_two_the_stage_takes_half():
    default, threads, now = probe(TRAIN_CONCURRENT_JOBS="2")
    assert threads == now == max(1, default // 2)
    default, threads, now = probe(TRAIN_CONCURRENT_JOBS=str(4 * default))
    assert threads == now == 1  # never 0 threads


def test_export_passes_the_share_to_onnxruntime():
    """The parity check's onnxruntime session gets the share (threads) and still computes
    the same outputs as the default pool (this tiny model sums in one order either way)."""
    import numpy as np
    import torch

    from stages.lib.model.formats import onnx_runner, outputs

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    x = np.random.default_rng(0).standard_normal((5, 3, 2, 2)).astype(np.float32)
    import io

    buf = io.BytesIO()
    torch.onnx.export(model, torch.from_numpy(x[:1]), buf, input_names=["input"],
                      dynamic_axes={"input": {0: "n"}}, dynamo=False)
    blob = buf.getvalue()
    one = outputs(onnx_runner(blob, threads=1), x, 2)
    assert np.allclose(one, outputs(onnx_runner(blob), x, 2), atol=1e-6)
    assert np.allclose(one,
                       model(torch.from_numpy(x)).detach().numpy(), atol=1e-5)
