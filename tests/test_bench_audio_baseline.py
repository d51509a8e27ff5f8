"""bench/audio_baseline.py's own pieces (issue 40): the baseline models' shapes, the bare loop
that trains for a CPU-seconds budget (and learns), its CTC loss against the pipeline's, and the
greedy CER/WER scoring. Offline, on a few synthetic tensors: a few CPU seconds."""
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from bench.audio_baseline import ctc, ctc_model, kws_cnn, predict, speech_scores, top1, train_for  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def bands(n: int, classes: int, seed: int):
    """Log-mel-like N x 1 x 16 x 20 noise where class k lights up mel bands 3k..3k+2."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, 1, 16, 20, generator=g) * 0.5
    for i, k in enumerate(y.tolist()):
        x[i, 0, 3 * k:3 * k + 3] += 2.0
    return x, y


def test_model_shapes():
    x = torch.zeros(3, 1, 40, 101)
    assert kws_cnn(7)(x).shape == (3, 7)
    assert ctc_model(12, mels=40)(x).shape == (3, 51, 12)  # ceil(101 / 2) frames


def test_train_for_learns_within_its_budget():
    torch.manual_seed(0)
    x, y = bands(96, 4, seed=1)
    x_test, y_test = bands(64, 4, seed=2)
    model = kws_cnn(4)
    assert top1(predict(model, x_test), y_test) < 0.6  # untrained: about chance
    tic = time.process_time()
    epochs, spent = train_for(model, torch.nn.functional.cross_entropy, x, y, cpu_seconds=1.5,
                              batch=16)
    assert epochs >= 2
    assert 1.5 <= spent < 1.6  # stops at the first batch past the budget (a batch: ~10 ms)
    assert spent <= time.process_time() - tic  # the loop's own CPU, not more
    assert top1(predict(model, x_test), y_test) >= 0.9


def test_ctc_matches_the_pipelines_loss():
    from stages.tasks.common.ctc import ctc_loss

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 10, 6, generator=g)
    y = torch.tensor([[2, 1, 3, 0], [3, 2, 2, 5], [1, 4, 0, 0], [0, 0, 0, 0]], dtype=torch.int32)
    assert float(ctc(logits, y)) == pytest.approx(float(ctc_loss(logits, y, "mean")), rel=1e-6)


def test_speech_scores_decode_greedy():
    charset = ["a", "b", " "]  # codes 1, 2, 3; 0 is the blank
    path = [1, 1, 0, 2, 3, 1]  # "ab a" after collapsing repeats and dropping blanks
    logits = torch.from_numpy(np.eye(4, dtype=np.float32)[path] * 10)[None]
    assert speech_scores(logits, ["ab a"], charset)["cer"] == 0.0
    s = speech_scores(logits, ["ab b"], charset)
    assert s["cer"] == pytest.approx(0.25) and s["wer"] == pytest.approx(0.5)
