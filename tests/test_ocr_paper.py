"""The paper's blemishes as an OCR training augmentation (stages/tasks/ocr/paperaug.py:
train.aug_gradient and train.aug_specks), checked against a numpy reference written here from
the definition in docs/ocr.md, on a few seeds, for dark ink on light paper and the reverse."""
import dataclasses

import numpy as np
import pytest

SEEDS = (0, 1, 7, 123456789)


def params(**kw):
    from stages.lib.params import Train

    return dataclasses.replace(Train(), **kw)


def a_line(seed: int, light_paper: bool = True) -> np.ndarray:
    """A 1 x 16 x 48 float32 line: paper with strokes, normalised as prepare writes it."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 0.9, (1, 16, 48))
    x[:, 4:12, 3:40:3] = rng.uniform(-1.0, -0.6, (1, 8, 13))
    return (x if light_paper else -x).astype(np.float32)


def reference(x: np.ndarray, gradient: float, specks: float, u, field: np.ndarray):
    """The definition, pixel by pixel, in float64."""
    x = x.astype(np.float64).copy()
    c, h, w = x.shape
    if gradient:
        lo, hi = x.min(), x.max()
        flat = np.sort(x.ravel())
        median = flat[(flat.size - 1) // 2]  # the lower middle value
        light = median >= (lo + hi) / 2
        out = x.copy()
        for i in range(h):
            for j in range(w):
                ramp = ((2 * u[0] - 1) * gradient * ((j + 0.5) / w - 0.5)
                        + (2 * u[1] - 1) * gradient * ((i + 0.5) / h - 0.5))
                for k in range(c):
                    share = (x[k, i, j] - lo) / (hi - lo) if light else \
                        (hi - x[k, i, j]) / (hi - lo)
                    out[k, i, j] = x[k, i, j] + min(max(share, 0), 1) * ramp * (hi - lo)
        x = out
    if specks:
        density = u[2] * specks
        dark, bright = field < density / 2, field > 1 - density / 2
        if u[3] < 0.5:  # each mark grown one pixel right and down
            def grow(m):
                g = m.copy()
                g[1:, :] |= m[:-1, :]
                g[:, 1:] |= m[:, :-1]
                g[1:, 1:] |= m[:-1, :-1]
                return g
            dark, bright = grow(dark), grow(bright)
        lo, hi = x.min(), x.max()
        x[:, dark] = lo
        x[:, bright & ~dark] = hi
    return x


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("light_paper", [True, False])
def test_the_paper_augmentation_matches_the_reference(seed, light_paper):
    import torch

    from stages.tasks.ocr import paperaug

    x = a_line(seed, light_paper)
    d = paperaug.draws(torch.Generator().manual_seed(seed), x.shape)
    for u3 in (0.2, 0.8):  # 1-pixel and 2 x 2 specks
        d = {**d, "u": [*d["u"][:3], u3, d["u"][4]]}
        for gradient, specks in ((0.6, 0.0), (0.0, 0.05), (0.6, 0.05)):
            p = params(aug_gradient=gradient, aug_specks=specks)
            got = paperaug.augment(torch.from_numpy(x), p, d).numpy()
            want = reference(x, gradient, specks, d["u"], d["field"].numpy())
            assert np.allclose(got, want, atol=1e-5), (gradient, specks, u3)


def test_the_gradient_moves_the_paper_and_leaves_the_ink():
    import torch

    from stages.tasks.ocr import paperaug

    x = a_line(3)
    ink = x == x.min()
    d = {"u": [1.0, 0.5, 0.0, 0.0, 0.0], "field": torch.ones(16, 48)}  # along the line only
    out = paperaug.augment(torch.from_numpy(x), params(aug_gradient=0.5), d).numpy()
    assert np.array_equal(out[ink], x[ink])  # the darkest ink stays
    paper = x == x.max()
    delta = (out - x)[paper]
    cols = np.nonzero(paper)[2]
    span = float(x.max() - x.min())
    # the brightest paper moves by 0.5 grey ranges from the left edge to the right one
    assert np.allclose(delta, 0.5 * span * ((cols + 0.5) / 48 - 0.5), atol=1e-5)
    left, right = out[0, :, :8].mean(), out[0, :, -8:].mean()
    assert right > left  # u0 = 1: lighter to the right


def test_specks_cover_the_drawn_share_of_pixels():
    import torch

    from stages.tasks.ocr import paperaug

    x = torch.zeros(1, 64, 512)
    x[:, 20:40, 10:500:4] = -1.0  # ink on paper at 0
    field = torch.rand(64, 512, generator=torch.Generator().manual_seed(5))
    d = {"u": [0.5, 0.5, 1.0, 0.9, 0.0], "field": field}  # the whole share, 1-pixel specks
    out = paperaug.augment(x, params(aug_specks=0.02), d)
    dark = (out == -1.0) & (x != -1.0)
    light = (out == 0.0) & (x == -1.0)
    assert dark.float().mean().item() == pytest.approx(0.01 * 0.9, rel=0.1)  # paper's share
    assert light.sum() > 0  # holes in the ink
    assert torch.equal(out[x == out], x[x == out])


def test_the_paper_knobs_are_seeded_come_last_and_off_change_nothing():
    import torch

    from stages.lib.train.augment import augmenting, sample_seed
    from stages.tasks.ocr import cropaug, paperaug, strokeaug
    from stages.tasks.ocr.augment import augment, augment_batch

    x = torch.from_numpy(a_line(4))
    assert torch.equal(augment(x.clone(), params(), 11), x)  # every knob off: the line itself
    for key in ("aug_gradient", "aug_specks"):
        assert augmenting(params(**{key: 0.01}))
    older = params(aug_rotate=1.5, aug_stretch=0.15, aug_jitter=0.1, aug_crop_line=0.5)
    on = dataclasses.replace(older, aug_gradient=0.4, aug_specks=0.02)
    seeds = [sample_seed(0, e, i) for e in range(2) for i in range(3)]
    outs = [augment(x, on, s) for s in seeds]
    assert len({o.numpy().tobytes() for o in outs}) == len(seeds)  # each sample its own draws
    for s, o in zip(seeds, outs, strict=True):
        assert torch.equal(o, augment(x, on, s))  # the same seed, the same pixels
        # the older knobs' pixels, then the paper's, drawn after every other draw
        g = torch.Generator().manual_seed(s)
        torch.rand(8, generator=g)
        torch.randn(x.shape, generator=g)
        strokeaug.draws(g, x.shape)
        cropaug.draws(g)
        d = paperaug.draws(g, x.shape)
        assert torch.equal(o, paperaug.augment(augment(x, older, s), on, d))
    batch = augment_batch(torch.stack([x] * 3), on, seeds[:3])
    for i, s in enumerate(seeds[:3]):
        assert torch.equal(batch[i], augment(x, on, s))


def test_the_recipe_turns_the_paper_on_and_the_sample_keeps_it_off():
    from stages.tasks.ocr import TASK

    assert TASK.recipe["train.aug_gradient"] > 0 and TASK.recipe["train.aug_specks"] > 0
    assert TASK.sample_params["train.aug_gradient"] == 0
    assert TASK.sample_params["train.aug_specks"] == 0


def test_the_peers_bench_variants_switch_only_the_paper():
    """bench.ocr_peers: `crops` trains with the paper's knobs off (its documented rows), `paper`
    with the recipe's; every other train knob the same."""
    from bench.ocr_peers import variant_params
    from stages.tasks.ocr import TASK

    crops, paper = variant_params("crops", 8, 0), variant_params("paper", 8, 0)
    assert (crops.aug_gradient, crops.aug_specks) == (0.0, 0.0)
    assert paper.aug_gradient == TASK.recipe["train.aug_gradient"] > 0
    assert paper.aug_specks == TASK.recipe["train.aug_specks"] > 0
    assert dataclasses.replace(paper, aug_gradient=0.0, aug_specks=0.0) == crops
    base = variant_params("base", 8, 0)
    assert base.aug_crop_line == 0.0 and base.aug_specks == 0.0
