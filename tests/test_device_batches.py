"""Batches built on the device (stages/lib/train/devicedata.py), with the CPU standing in for the
GPU: the split loaded whole or streamed batch by batch gives the batches of the host loader,
so training gives the same weights; the budget decides which; a NaN is still named."""
import dataclasses

import numpy as np
import pytest
import torch

from stages.lib.train.devicedata import Source, fits, use_device_batches
from stages.lib.train.loop import NonFinite, fit, setup
from stages.lib.params import Train
from stages.lib.data.shards import load_split, write_processed
from stages.tasks import default_task, get

META = {"classes": ["a", "b"], "image_size": 8, "mean": [0.4], "std": [0.3]}


def processed(root, n=40, channels=1):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, n).astype(np.int64)
    x = (rng.integers(0, 120, (n, 8, 8, channels)) + 120 * y[:, None, None, None]).astype(
        np.uint8)
    meta = {**META, "channels": channels, "mean": [0.4] * channels, "std": [0.3] * channels}
    write_processed(root, {"train": (x, y), "val": (x[:16], y[:16])}, meta, shard_size=7)
    return load_split("train", root, torch=True), load_split("val", root, torch=True)


def trained(p, data, meta):
    run = setup(p, meta, default_task())
    steps = []
    fit(p, run, data, on_step=lambda *a: steps.append(a))
    return run, steps


def test_the_budget_keeps_a_split_resident_only_within_its_share():
    assert fits(77 * 2 ** 20, 1000 * 2 ** 20, 0.5)
    assert not fits(600 * 2 ** 20, 1000 * 2 ** 20, 0.5)
    assert fits(500, 1000, 0.5) and not fits(501, 1000, 0.5)
    assert use_device_batches(Train(), "cuda:0") and not use_device_batches(Train(), "cpu")
    assert use_device_batches(Train(device_batches="on"), "cpu")
    assert not use_device_batches(Train(device_batches="off"), "cuda:0")


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("knobs", [{}, {"aug_hflip": 0.5, "aug_jitter": 0.2},
                                   {"grad_accum_steps": 2}])
def test_resident_and_streamed_batches_train_the_same_weights_as_the_host_loader(
        tmp_path, channels, knobs):
    (x, y, meta), (xv, yv, _) = processed(tmp_path, channels=channels)
    data = (x, y, xv, yv)
    base = Train(epochs=2, batch_size=8, lr=0.01, **knobs)
    ref, ref_steps = trained(base, data, meta)
    for share in (1.0, 1e-12):  # the whole split fits / nothing fits: streamed
        p = dataclasses.replace(base, device_batches="on", device_data_share=share)
        run, steps = trained(p, data, meta)
        assert run.source.resident == (share == 1.0)
        assert steps == ref_steps
        assert all(torch.equal(a, b) for a, b in zip(run.model.state_dict().values(),
                                                     ref.model.state_dict().values(),
                                                     strict=True))


def test_streamed_batches_come_in_the_loaders_order_with_the_same_values(tmp_path):
    from stages.lib.train.augment import EpochBatches, epoch_order

    (x, y, _), _ = processed(tmp_path)
    p = Train(batch_size=8)
    ds = EpochBatches(x, y, epoch_order(len(x), 0, 3), 8, p, 3, default_task())
    for share in (1.0, 1e-12):
        source = Source(x, y, "cpu", share, default_task().modality)
        got = list(source.batches(ds, 2, default_task(), p, 3))
        assert len(got) == len(ds) - 2
        for (idx, xb, yb), b in zip(got, range(2, len(ds)), strict=True):
            ridx, rx, ry = ds[b]
            assert torch.equal(idx, ridx) and torch.equal(xb, rx) and torch.equal(yb, ry)


def test_a_nan_sample_is_named_on_the_device_path(tmp_path):
    (x, y, meta), (xv, yv, _) = processed(tmp_path)
    x.poisoned.add(13)
    p = Train(epochs=1, batch_size=8, lr=0.01, device_batches="on", device_data_share=1e-12)
    with pytest.raises(NonFinite) as err:
        trained(p, (x, y, xv, yv), meta)
    assert 13 in torch.cat(err.value.info["indices"]).tolist()


@pytest.mark.parametrize("task,knobs", [
    ("detection", {"aug_crop_scale": 0.5, "aug_hflip": 0.5, "aug_jitter": 0.2,
                   "aug_zoom_out": 2.0}),
    ("segmentation", {"aug_crop_scale": 0.5, "aug_hflip": 0.5, "aug_rotate": 10.0}),
    ("ocr", {"aug_stretch": 0.1, "aug_rotate": 2.0, "aug_blur": 0.5, "aug_jitter": 0.2}),
])
def test_batched_augmentations_make_no_cpu_tensor_on_the_meta_device(task, knobs):
    """On the meta device every op runs on shapes alone: a CPU-made tensor mixed into the
    batch raises, as it would on CUDA (docs/gpu.md, wrong-device bugs)."""
    x = torch.empty(4, 1 if task == "ocr" else 3, 16, 32, device="meta")
    y = {"detection": torch.empty(4, 5, 5, device="meta"),
         "segmentation": torch.empty(4, 16, 32, dtype=torch.uint8, device="meta"),
         "ocr": torch.empty(4, 6, dtype=torch.int64, device="meta")}[task]
    gx, gy = get(task).augment_batch(x, y, Train(**knobs), list(range(4)))
    assert gx.device.type == gy.device.type == "meta" and gx.shape == x.shape


@pytest.mark.parametrize("resident", [True, False])
def test_the_device_path_makes_no_cpu_tensor_on_the_meta_device(tmp_path, monkeypatch, resident):
    """The device path (resident gather or streamed copy, normalise, batched augmentation) with
    the meta device standing in for a GPU: a CPU-made tensor mixed in would raise."""
    from stages.lib.train import devicedata
    from stages.lib.train.augment import EpochBatches, epoch_order

    (x, y, _), _ = processed(tmp_path, channels=3)
    monkeypatch.setattr(devicedata, "free_bytes", lambda device: 2 ** 40 if resident else 0)
    p = Train(batch_size=8, aug_crop_scale=0.6, aug_hflip=0.5, aug_rotate=10.0, aug_jitter=0.2)
    ds = EpochBatches(x, y, epoch_order(len(x), 0, 0), 8, p, 0, default_task())
    source = Source(x, y, "meta", 0.5, default_task().modality)
    assert source.resident == resident
    got = list(source.batches(ds, 0, default_task(), p, 0))
    assert len(got) == len(ds)
    assert all(xb.device.type == yb.device.type == "meta" and xb.shape[1:] == (3, 8, 8)
               for _, xb, yb in got)
