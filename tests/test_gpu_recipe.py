"""tools.init's GPU recipe (tools/gpu_recipe.py) from a given free-memory figure: a batch that
fills the GPU's share, the lr scaled linearly, the warm-up lengthened; nothing on the CPU."""
from tools import gpu_recipe
from tools.gpu_recipe import propose

GIB = 2 ** 30


def test_an_h200_gets_a_batch_that_fills_it_with_the_lr_scaled_and_a_longer_warmup():
    got = {k: v for k, v, _ in propose(16, 0.002, 1, 30, 130 * GIB, 5 * 2 ** 20)}
    # 0.6 * 130 GiB / 5 MiB = 15974 samples: capped at MAX_BATCH
    assert got == {"train.batch_size": 1024, "train.lr": 0.128, "train.warmup_epochs": 7}


def test_the_batch_is_the_largest_power_of_two_that_fits_and_the_split_caps_it():
    got = {k: v for k, v, _ in propose(32, 0.003, 0, 15, 8 * GIB, 20 * 2 ** 20)}
    assert got["train.batch_size"] == 128  # 0.6 * 8 GiB / 20 MiB = 245 -> 128
    assert got["train.lr"] == 0.012 and got["train.warmup_epochs"] == 2
    capped = {k: v for k, v, _ in propose(16, 0.002, 1, 30, 130 * GIB, 2 ** 20, n_train=1000)}
    assert capped["train.batch_size"] == 64  # at least eight steps an epoch


def test_every_choice_says_why_and_warmup_stays_under_the_epochs():
    out = propose(8, 0.01, 0, 3, 80 * GIB, 2 ** 20)
    assert all(why.startswith("GPU recipe:") for _, _, why in out)
    assert dict((k, v) for k, v, _ in out)["train.warmup_epochs"] == 2
    assert "GiB free" in out[0][2] and "linear scaling" in out[1][2]


def test_no_proposal_when_the_recipe_already_fills_the_gpu_or_there_is_none(monkeypatch):
    assert propose(256, 0.01, 2, 30, 1 * GIB, 4 * 2 ** 20) == []
    monkeypatch.setattr(gpu_recipe, "gpu_present", lambda: False)
    assert gpu_recipe.choices({"train.batch_size": 16}) == []
