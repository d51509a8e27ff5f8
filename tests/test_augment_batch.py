"""Each batched augmentation (stages/lib/modality/imagebatch.py and the tasks' augment_batch)
against its per-sample reference, on a few seeds: identical bytes where the ops are the same
float32 ops; within TOL where a bilinear resampling runs as a gather instead of ATen's
interpolate kernel (documented in imagebatch.py)."""

import pytest
import torch

from stages.lib.train.augment import sample_seed
from stages.lib.modality import imageaug, imagebatch
from stages.lib.params import Train

TOL = 1e-5
SEEDS = (0, 1, 7)


def seeds_of(seed, n=6, epoch=3):
    return [sample_seed(seed, epoch, i) for i in range(n)]


def images(seed, n=6, c=3, h=24, w=28):
    return torch.randn(n, c, h, w, generator=torch.Generator().manual_seed(seed))


def reference(fn, x, seeds):
    return torch.stack([fn(xi, s) for xi, s in zip(x, seeds, strict=True)])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("knobs,exact", [
    ({"aug_hflip": 0.5}, True), ({"aug_jitter": 0.3}, True),
    ({"aug_rotate": 20.0}, True), ({"aug_hflip": 0.3, "aug_rotate": 15.0, "aug_jitter": 0.2}, True),
    ({"aug_crop_scale": 0.5}, False),
    ({"aug_crop_scale": 0.6, "aug_hflip": 0.5, "aug_rotate": 10.0, "aug_jitter": 0.2}, False),
])
def test_image_modality_batched_equals_per_sample(seed, knobs, exact):
    p = Train(**knobs)
    x, seeds = images(seed), seeds_of(seed)
    ref = reference(lambda xi, s: imageaug.augment(xi, p, s), x, seeds)
    got = imagebatch.augment_batch(x, p, seeds)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    if exact:
        assert torch.equal(got, ref)
    else:
        # rotation's nearest sampling can pick the other pixel where the crop moved a value
        # by an ulp; without rotation every pixel is within TOL
        assert (got - ref).abs().max() <= TOL or knobs.get("aug_rotate")
        assert ((got - ref).abs() <= TOL).float().mean() > 0.99


def test_resize_regions_is_within_tol_of_interpolate_and_exact_for_the_whole_image():
    x = images(0)
    boxes = torch.tensor([[1, 2, 13, 21], [0, 0, 24, 28], [5, 3, 19, 11], [7, 7, 9, 17],
                          [0, 4, 23, 22], [2, 1, 3, 3]])
    ref = torch.stack([torch.nn.functional.interpolate(
        x[i:i + 1, :, t:t + h, le:le + w], size=(24, 28), mode="bilinear",
        align_corners=False)[0] for i, (t, le, h, w) in enumerate(boxes.tolist())])
    got = imagebatch.resize_regions(x, boxes)
    assert (got - ref).abs().max() <= TOL
    assert torch.equal(got[1], x[1])


def test_batched_augmentation_makes_no_cpu_tensor_of_pixels():
    """On the meta device every op runs on shapes alone: a CPU-made pixel tensor mixed into
    the batch would raise (the failure CUDA reports: docs/gpu.md, wrong-device bugs)."""
    p = Train(aug_crop_scale=0.5, aug_hflip=0.5, aug_rotate=10.0, aug_jitter=0.2)
    x = torch.empty(4, 3, 16, 16, device="meta")
    assert imagebatch.augment_batch(x, p, seeds_of(0, 4)).device.type == "meta"
    from stages.lib.modality import audioaug

    p = Train(aug_time_mask=8, aug_freq_mask=4, aug_freq_shift=2)
    x = torch.empty(4, 1, 20, 40, device="meta")
    assert audioaug.augment_batch(x, p, seeds_of(0, 4)).device.type == "meta"


def boxes(seed, n=6, k=5, h=24, w=28):
    """N x K x 5 [class, x1, y1, x2, y2], the last rows of some samples padding (-1)."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, k, 2, generator=g) * torch.tensor([w - 6, h - 6])
    wh = 2 + torch.rand(n, k, 2, generator=g) * 10
    y = torch.cat([torch.randint(0, 3, (n, k, 1), generator=g).float(), xy,
                   (xy + wh).minimum(torch.tensor([w, h]))], 2)
    y[::2, -2:] = -1
    return y


def agree(got, ref, exact):
    if exact:
        assert torch.equal(got, ref)
    else:
        assert (got - ref).abs().max() <= TOL


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("knobs,exact", [
    ({"aug_hflip": 0.5, "aug_jitter": 0.2}, True),
    ({"aug_crop_scale": 0.5}, False),
    ({"aug_zoom_out": 2.0, "aug_hflip": 0.5}, False),
    ({"aug_crop_scale": 0.6, "aug_hflip": 0.5, "aug_jitter": 0.2, "aug_zoom_out": 1.5}, False),
])
def test_detection_batched_equals_per_sample(seed, knobs, exact):
    from stages.tasks.detection.augment import augment, augment_batch

    p = Train(**knobs)
    x, y, seeds = images(seed), boxes(seed), seeds_of(seed)
    pairs = [augment(xi, yi, p, s) for xi, yi, s in zip(x, y, seeds, strict=True)]
    gx, gy = augment_batch(x, y, p, seeds)
    agree(gx, torch.stack([a for a, _ in pairs]), exact)
    assert torch.equal(gy, torch.stack([b for _, b in pairs]))  # the boxes: always identical


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("knobs,exact", [
    ({"aug_hflip": 0.5, "aug_jitter": 0.2, "aug_rotate": 15.0}, True),
    ({"aug_crop_scale": 0.5, "aug_hflip": 0.5}, False),
])
def test_segmentation_batched_equals_per_sample(seed, knobs, exact):
    from stages.tasks.segmentation.transforms import augment, augment_batch

    p = Train(**knobs)
    x, seeds = images(seed), seeds_of(seed)
    y = torch.randint(0, 4, (6, 24, 28), generator=torch.Generator().manual_seed(seed),
                      dtype=torch.uint8)
    pairs = [augment(xi, yi, p, s) for xi, yi, s in zip(x, y, seeds, strict=True)]
    gx, gy = augment_batch(x, y, p, seeds)
    agree(gx, torch.stack([a for a, _ in pairs]), exact)
    assert torch.equal(gy, torch.stack([b for _, b in pairs]))  # the masks: always identical


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("knobs", [
    {"aug_stretch": 0.15, "aug_rotate": 3.0, "aug_blur": 0.5, "aug_jitter": 0.2},
    {"aug_blur": 0.5}, {"aug_jitter": 0.3},
    {"aug_stretch": 0.1, "aug_stroke": 0.5, "aug_shear": 0.2, "aug_texture": 0.1},
    {"aug_jitter": 0.1, "aug_crop_line": 0.5, "aug_gradient": 0.4, "aug_specks": 0.02},
])
def test_ocr_batched_equals_per_sample(seed, knobs):
    from stages.tasks.ocr.augment import augment, augment_batch

    p = Train(**knobs)
    x, seeds = images(seed, c=1, h=16, w=64), seeds_of(seed)
    ref = torch.stack([augment(xi, p, s) for xi, s in zip(x, seeds, strict=True)])
    assert torch.equal(augment_batch(x, p, seeds), ref)


def test_every_task_has_a_batched_augmentation_or_the_per_sample_fallback():
    """Task.augment_batch: a task that only implements augment (a new task) still augments a
    batch, sample by sample, with the same bytes."""
    from stages.tasks.base import Task

    class OnlyPerSample(Task):
        def augment(self, x, y, p, seed):
            return x + seed % 7, y * 2

    x, y = images(0), torch.arange(6)
    seeds = seeds_of(0)
    gx, gy = OnlyPerSample().augment_batch(x, y, Train(aug_jitter=0.1), seeds)
    assert torch.equal(gx, torch.stack([xi + s % 7 for xi, s in zip(x, seeds, strict=True)]))
    assert torch.equal(gy, y * 2)
    from stages.tasks import get

    p = Train(aug_hflip=0.5, aug_jitter=0.2)
    ref = torch.stack([imageaug.augment(xi, p, s) for xi, s in zip(x, seeds, strict=True)])
    assert torch.equal(get("classification").augment_batch(x, y, p, seeds)[0], ref)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("knobs", [
    {"aug_time_mask": 12}, {"aug_freq_mask": 6}, {"aug_freq_shift": 3},
    {"aug_time_mask": 10, "aug_freq_mask": 5, "aug_masks": 3, "aug_freq_shift": 2},
])
def test_audio_batched_equals_per_sample_for_both_audio_tasks(seed, knobs):
    """SpecAugment batched (stages/lib/modality/audioaug.py) against the per-clip masks, and
    both audio tasks reach it through Task.augment_batch."""
    from stages.lib.modality import audioaug
    from stages.tasks import get

    p = Train(**knobs)
    x, seeds = images(seed, c=1, h=20, w=50), seeds_of(seed)
    ref = torch.stack([audioaug.augment(xi, p, s) for xi, s in zip(x, seeds, strict=True)])
    assert not torch.equal(ref, x)  # the knobs changed something
    assert torch.equal(audioaug.augment_batch(x, p, seeds), ref)
    y = torch.arange(len(x))
    for task in ("audio", "speech"):
        got, same_y = get(task).augment_batch(x, y, p, seeds)
        assert torch.equal(got, ref) and torch.equal(same_y, y), task


@pytest.mark.parametrize("mean,std", [([0.41], [0.23]), (0.5, 0.25), ([0.3, 0.5, 0.7], [0.2] * 3)])
def test_audio_features_normalised_on_the_device_equal_the_host_ones(mean, std):
    """train's device batches keep the log-mel features as stored (uint8) and normalise them
    there: the same values as the host's normalize."""
    import numpy as np

    from stages.lib.modality import audio

    batch = np.random.default_rng(3).integers(0, 256, (5, 20, 40, 1), dtype=np.uint8)
    host = torch.from_numpy(audio.normalize(batch, mean, std))
    dev = audio.normalize_tensor(torch.from_numpy(batch), mean, std)
    assert dev.shape == host.shape == (5, 1, 20, 40) and torch.equal(dev, host)
