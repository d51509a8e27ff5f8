"""train.ema: the weight average (stages/lib/train/ema.py) is what validation scores and what
becomes model.pt; it is checkpointed, so a killed run resumes to the same bytes."""
import pytest
import torch

from stages.lib.train.ema import EMA
from tests.test_train_resume import KILLED, make_tiny, outs, train_stage


def test_the_average_follows_the_rule_and_skips_nothing():
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    ema = EMA(net, 0.9, net.state_dict().keys())
    start = {k: v.clone() for k, v in net.state_dict().items()}
    expected = {k: v.clone().double() for k, v in start.items() if v.is_floating_point()}
    for step in (1, 2, 3):
        with torch.no_grad():
            for q in net.parameters():
                q.add_(float(step))
        net.train()(torch.randn(4, 3))  # moves the running statistics and the batch count
        d = min(0.9, (1 + step) / (10 + step))
        ema.update(net, step)
        for k, v in net.state_dict().items():
            if k in expected:
                expected[k] = d * expected[k] + (1 - d) * v.double()
    for k, v in ema.state.items():
        if v.is_floating_point():
            assert torch.allclose(v.double(), expected[k], atol=1e-5), k
        else:  # num_batches_tracked: copied
            assert torch.equal(v, net.state_dict()[k])
    assert ema.factor(1) == pytest.approx(2 / 11) and ema.factor(10 ** 6) == 0.9
    kept = {k: v.clone() for k, v in net.state_dict().items()}
    with ema.applied(net):
        assert torch.equal(net[0].weight, ema.state["0.weight"])
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in kept.items())


@pytest.fixture(scope="module")
def averaged(tmp_path_factory):
    root = make_tiny(tmp_path_factory.mktemp("ema"), {"ema": 0.8})
    proc = train_stage(root)
    assert proc.returncode == 0, proc.stderr
    return root, outs(root)


def test_model_pt_holds_the_average_not_the_last_weights(averaged, tmp_path):
    root, _ = averaged
    last = torch.load(root / "models/checkpoints/last.pt", weights_only=False)
    saved = torch.load(root / "models/model.pt", weights_only=False)
    weights = saved.get("state_dict", saved.get("model", saved))
    average = last["ema"]["state"]
    assert set(average) == set(last["model"])
    differ = [k for k in average if not torch.equal(average[k], last["model"][k])]
    assert differ, "the average equals the last weights: nothing was averaged"
    for k, v in average.items():
        assert torch.equal(weights[k], v), k
    plain = make_tiny(tmp_path)  # the same run without the average writes other weights
    assert train_stage(plain).returncode == 0
    assert outs(plain)["models/model.pt"] != outs(root)["models/model.pt"]


def test_a_killed_run_with_the_average_resumes_to_identical_bytes(averaged, tmp_path):
    _, baseline = averaged
    root = make_tiny(tmp_path, {"ema": 0.8})
    killed = train_stage(root, PIPELINE_TEST_KILL_AT_STEP=9)
    assert killed.returncode == KILLED, killed.stderr
    resumed = train_stage(root)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from models/checkpoints/last.pt" in resumed.stdout
    assert outs(root) == baseline


def test_keep_best_takes_the_best_epochs_average(tmp_path):
    root = make_tiny(tmp_path, {"ema": 0.8, "keep": "best"})
    assert train_stage(root).returncode == 0
    best = torch.load(root / "models/checkpoints/best.pt", weights_only=False)
    saved = torch.load(root / "models/model.pt", weights_only=False)
    weights = saved.get("state_dict", saved.get("model", saved))
    for k, v in best["ema"]["state"].items():
        assert torch.equal(weights[k], v), k
