"""train.num_workers never changes the weights: a batch is the same bytes whether the trainer
builds it in its own process (at train.threads threads) or a DataLoader worker does (at one),
for every task's augmentation at sizes where torch's CPU kernels split their work over threads;
and for every task's shared tiny run, train with 2 workers writes the model.pt of 0 workers.
"""
import shutil

import pytest
import torch

from stages.lib.train.augment import EpochBatches, batches, epoch_order, one_thread
from stages.lib.params import Train
from stages.tasks import get
from tests.conftest import copy_run

# per task: its recipe's augmentation (plus a crop for classification, whose recipe has none),
# on inputs large enough that bilinear resampling runs on both threads (3 x 160 x 160 is
# 76,800 values; torch splits work above 32,768)
SIZES = {"classification": (3, 96, 96), "detection": (3, 160, 160),
         "segmentation": (3, 128, 128), "ocr": (1, 32, 256)}


def train_params(task) -> Train:
    recipe = {k[len("train."):]: v for k, v in get(task).recipe.items() if k.startswith("train.")}
    if task == "classification":
        recipe.update(aug_crop_scale=0.6, aug_hflip=0.5, aug_jitter=0.1)
    return Train(**recipe)


def targets(task, n, shape):
    g = torch.Generator().manual_seed(1)
    if task == "classification":
        return torch.randint(0, 3, (n,), generator=g)
    if task == "detection":
        xy = torch.rand(n, 4, 2, generator=g) * (shape[-1] - 40)
        wh = 8 + torch.rand(n, 4, 2, generator=g) * 30
        return torch.cat([torch.randint(0, 2, (n, 4, 1), generator=g).float(), xy, xy + wh], 2)
    if task == "segmentation":
        return torch.randint(0, 3, (n, *shape[1:]), generator=g).to(torch.uint8)
    y = torch.zeros(n, 9, dtype=torch.long)
    y[:, 0], y[:, 1:4] = 3, torch.randint(1, 4, (n, 3), generator=g)
    return y


@pytest.mark.parametrize("task", sorted(SIZES))
def test_a_batch_is_the_same_in_the_trainer_and_in_a_worker(task):
    p = train_params(task)
    shape = SIZES[task]
    n = 8
    x = torch.randn(n, *shape, generator=torch.Generator().manual_seed(0))
    y = targets(task, n, shape)
    ds = EpochBatches(x, y, epoch_order(n, p.seed, 3), 4, p, 3, get(task))
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the trainer's threads (train.threads' default)
    try:
        inline = [ds[b] for b in range(len(ds))]
        in_workers = list(batches(ds, 0, 2))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert len(inline) == len(in_workers) == 2
    for (i1, x1, y1), (i2, x2, y2) in zip(inline, in_workers, strict=True):
        assert torch.equal(i1, i2)
        assert torch.equal(x1, x2), f"{task}: augmented pixels differ by {(x1 - x2).abs().max()}"
        assert torch.equal(y1, y2)


def test_one_thread_gives_the_threads_back():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_thread():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(ValueError), one_thread():
            raise ValueError
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.fixture(params=["trained_project", "detection_project", "segmentation_project",
                        "ocr_project"])
def shared_run(request):
    return request.getfixturevalue(request.param)


def test_two_workers_train_the_same_model(shared_run, tmp_path):
    """Where the portable kernels run, tests/test_kernels.py retrains every task's shared run
    with two workers under its hostile settings, the cheaper check of both promises."""
    from stages.lib.train import kernels
    from tools.project import dvc, set_params

    if not kernels.unsupported():
        pytest.skip("tests/test_kernels.py trains every shared run with 2 workers here")
    root = copy_run(shared_run, tmp_path / "run")
    shutil.rmtree(root / "models/checkpoints", ignore_errors=True)
    before = (root / "models/model.pt").read_bytes()
    set_params(root, {"train.num_workers": 2})
    dvc(root, "repro", "--single-item", "--force", "--no-run-cache", "train")
    assert (root / "models/model.pt").read_bytes() == before
