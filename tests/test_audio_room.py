"""The room and microphone augmentations (stages/lib/modality/audioroom.py): each effect against
a reference written here from its definition (explicit loops, the draws re-derived from the
seed), determinism per (seed, epoch, index), the batched path, and the params' ranges."""
import math
import types

import numpy as np
import pytest
import torch

from stages.lib.io import StageError
from stages.lib.modality import audioaug, audiocore, audioroom, audiospec
from stages.lib.train.augment import augmenting, sample_seed

MEAN, STD = 0.31, 0.27
OFF = dict(aug_speed=0.0, aug_pitch=0.0, aug_reverb=0.0, aug_noise=0.0, aug_gain=0.0,
           aug_bandlimit=0.0, aug_telephone=0.0, aug_noise_snr_min=5.0, aug_noise_snr_max=30.0)


def knobs(**on):
    return types.SimpleNamespace(**{**OFF, **on})


def clip_levels(seconds=0.7, tone=330.0):
    """A stored clip (uint8 40 x 101) of a gliding tone with a harmonic, centred in 1 s."""
    t = np.arange(int(seconds * 16000)) / 16000
    wave = (np.sin(2 * np.pi * (tone + 200 * t) * t) * np.exp(-((t - seconds / 2) / 0.2) ** 2)
            + 0.2 * np.sin(2 * np.pi * 3 * tone * t))
    return audiocore.wave_features(wave, 16000, dict(audiospec.DEFAULTS))[..., 0]


def normalised(q):
    return torch.from_numpy(audiocore.normalize(q[None, ..., None], [MEAN], [STD])[0])


def uniforms(seed, n=audioroom.DRAWS):
    """The draws re-derived: torch's generator seeded by the sample's seed + 1."""
    return torch.rand(n, generator=torch.Generator().manual_seed(seed + 1),
                      dtype=torch.float64).tolist()


def power_of(q):
    return 10.0 ** ((q.astype(np.float64) * 80.0 / 255.0 - 80.0) / 10.0)


def stored(power):
    """Mel power -> the normalised stored clip, through the modality's own quantiser."""
    q = audiocore.quantise(10.0 * np.log10(np.maximum(power, 1e-30)))
    return audiocore.normalize(q[None, ..., None], [MEAN], [STD])[0]


def centre_hz(n_mels=40):
    def mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    lo, hi = mel(20.0), mel(8000.0)
    return [700.0 * (10.0 ** ((lo + (hi - lo) * (i + 1) / (n_mels + 1)) / 2595.0) - 1.0)
            for i in range(n_mels)]


def lerp(xs, ys, at, left, right):
    """Linear interpolation by hand (xs increasing)."""
    if at < xs[0]:
        return left
    if at > xs[-1]:
        return right
    for i in range(len(xs) - 1):
        if xs[i] <= at <= xs[i + 1]:
            w = (at - xs[i]) / (xs[i + 1] - xs[i])
            return ys[i] * (1 - w) + ys[i + 1] * w
    return ys[-1]


def ref_warp(power, factor):
    c = centre_hz(power.shape[0])
    mel = [math.log10(1 + f / 700) for f in c]
    out = np.empty_like(power)
    for t in range(power.shape[1]):
        col = power[:, t].tolist()
        for m in range(power.shape[0]):
            out[m, t] = lerp(mel, col, math.log10(1 + c[m] / factor / 700), col[0], 1e-8)
    return out


def ref_speed(power, s):
    frames = power.shape[1]
    mid = (frames - 1) / 2
    out = np.empty_like(power)
    for m in range(power.shape[0]):
        row = power[m].tolist()
        for t in range(frames):
            out[m, t] = lerp(list(range(frames)), row, mid + (t - mid) * s, 1e-8, 1e-8)
    return ref_warp(out, s)


def ref_room_envelope(room, n_mels=40):
    rt60 = 0.2 + 0.7 * room / 7
    n = int(rt60 * 16000)
    noise = np.random.Generator(np.random.PCG64(room)).standard_normal(n)
    tail = [noise[i] * 1000.0 ** (-i / n) for i in range(n)]
    scale = 1.0 / math.sqrt(sum(v * v for v in tail))
    h = [1.0] + [v * scale for v in tail]
    mel = audiocore.mel_matrix(16000, 512, n_mels)
    hann = [0.5 - 0.5 * math.cos(2 * math.pi * i / 512) for i in range(512)]
    env = []
    for k in range(1 + len(h) // 160):
        seg = [(h[k * 160 + i] if k * 160 + i < len(h) else 0.0) * hann[i] for i in range(512)]
        env.append((np.abs(np.fft.fft(seg)[:257]) ** 2) @ mel)
    env = np.array(env).T
    return env / env[:, :1]


def ref_reverb(power, room):
    env = ref_room_envelope(room, power.shape[0])
    out = np.zeros_like(power)
    for m in range(power.shape[0]):
        for t in range(power.shape[1]):
            out[m, t] = sum(power[m, t - k] * env[m, k] for k in range(min(t + 1, env.shape[1])))
    return out


def ref_bandpass(power, lo, hi):
    gains = [(1 / (1 + (lo / f) ** 8) if lo > 0 else 1.0) / (1 + (f / hi) ** 8)
             for f in centre_hz(power.shape[0])]
    return power * np.array(gains)[:, None]


def white_share(n_mels=40):
    w = audiocore.mel_matrix(16000, 512, n_mels).sum(axis=0)
    return w / w.sum()


def ref_noise(power, snr, colour, seed):
    shape = white_share(power.shape[0]) * np.array(centre_hz(power.shape[0])) ** -colour
    z = torch.randn(power.shape, generator=torch.Generator().manual_seed(seed + 2),
                    dtype=torch.float64).numpy()
    n = shape[:, None] * 10 ** (1.5 * z / 10)
    return n * power.sum() / n.sum() / 10 ** (snr / 10)


def ref_telephone(power):
    out = ref_bandpass(power, 300.0, 3400.0)
    share = white_share(power.shape[0]) * (np.array(centre_hz(power.shape[0])) < 4000)
    share = share / share.sum()
    return out + share[:, None] * out.sum(axis=0)[None] * 10 ** -3.8


def close(got, want, q):
    """At most one level apart in any cell, and the same level in 98% of the cells (a power
    landing within rounding of a level's edge may go either way)."""
    step = 1.0 / (255 * STD)
    diff = np.abs(got.numpy()[0] - want[0]) / step
    assert diff.max() <= 1.01, diff.max()
    assert (diff < 0.5).mean() >= 0.98, (diff < 0.5).mean()
    assert not np.array_equal(want[0], normalised(q).numpy()[0])  # the effect did something


SEEDS = (0, 7, 123456789)


@pytest.mark.parametrize("seed", SEEDS)
def test_speed_matches_its_reference(seed):
    q = clip_levels()
    got = audioaug.augment(normalised(q), knobs(aug_speed=0.15), seed)
    s = 1 + 0.15 * (2 * uniforms(seed)[0] - 1)
    close(got, stored(ref_speed(power_of(q), s)), q)


@pytest.mark.parametrize("seed", SEEDS)
def test_pitch_matches_its_reference(seed):
    q = clip_levels()
    got = audioaug.augment(normalised(q), knobs(aug_pitch=3.0), seed)
    factor = 2 ** (3.0 * (2 * uniforms(seed)[1] - 1) / 12)
    close(got, stored(ref_warp(power_of(q), factor)), q)


@pytest.mark.parametrize("seed", SEEDS)
def test_reverb_matches_its_reference(seed):
    q = clip_levels()
    got = audioaug.augment(normalised(q), knobs(aug_reverb=1.0), seed)
    room = min(int(uniforms(seed)[3] * 8), 7)
    close(got, stored(ref_reverb(power_of(q), room)), q)


@pytest.mark.parametrize("seed", SEEDS)
def test_noise_and_gain_match_their_reference(seed):
    q = clip_levels()
    got = audioaug.augment(normalised(q), knobs(aug_noise=1.0, aug_gain=6.0,
                                                aug_noise_snr_min=0.0,
                                                aug_noise_snr_max=20.0), seed)
    u = uniforms(seed)
    gain, snr, colour = 6.0 * (2 * u[4] - 1), 20.0 * u[6], 2.0 * u[7]
    p = power_of(q)
    close(got, stored(p * 10 ** (gain / 10) + ref_noise(p, snr, colour, seed)), q)


@pytest.mark.parametrize("seed", SEEDS)
def test_bandlimit_matches_its_reference(seed):
    q = clip_levels(tone=150.0)
    got = audioaug.augment(normalised(q), knobs(aug_bandlimit=1.0), seed)
    u = uniforms(seed)
    close(got, stored(ref_bandpass(power_of(q), 400.0 * u[9], 3000.0 + 5000.0 * u[10])), q)


@pytest.mark.parametrize("seed", SEEDS)
def test_telephone_matches_its_reference(seed):
    q = clip_levels(tone=150.0)
    got = audioaug.augment(normalised(q), knobs(aug_telephone=1.0), seed)
    close(got, stored(ref_telephone(power_of(q))), q)


def test_the_stored_levels_are_recovered_and_written_back_exactly():
    q = clip_levels()
    x = normalised(q).numpy()[0].astype(np.float64)
    levels, top, step = audioroom.levels(x)
    assert np.array_equal(levels, q.astype(np.float64))
    assert step == pytest.approx(1 / (255 * STD), rel=1e-4)
    back = audioroom.relevel(audioroom.to_power(levels), top, step)
    assert np.abs(back - x).max() < 1e-5
    flat = np.full((40, 101), 0.5)
    assert audioroom.levels(flat) is None  # a single value: left as it is
    assert torch.equal(audioaug.augment(torch.from_numpy(flat[None]), knobs(aug_reverb=1.0), 3),
                       torch.from_numpy(flat[None]))


def test_a_wrong_lattice_would_fail_the_references():
    """The references see a difference when the effect is not the one drawn (another room)."""
    q = clip_levels()
    got = audioaug.augment(normalised(q), knobs(aug_reverb=1.0), 0)
    room = min(int(uniforms(0)[3] * 8), 7)
    with pytest.raises(AssertionError):
        close(got, stored(ref_reverb(power_of(q), (room + 4) % 8)), q)


def test_every_effect_is_a_pure_function_of_seed_epoch_and_index():
    q = clip_levels()
    x = normalised(q)
    p = knobs(aug_speed=0.1, aug_pitch=2.0, aug_reverb=0.5, aug_noise=0.5, aug_gain=6.0,
              aug_bandlimit=0.5, aug_telephone=0.3)
    seeds = {(s, e, i): sample_seed(s, e, i) for s in (0, 1) for e in (0, 3) for i in (0, 5)}
    first = {k: audioaug.augment(x, p, v) for k, v in seeds.items()}
    again = {k: audioaug.augment(x, p, v) for k, v in seeds.items()}
    assert all(torch.equal(first[k], again[k]) for k in seeds)
    values = list(first.values())
    assert all(not torch.equal(a, b) for i, a in enumerate(values) for b in values[i + 1:])
    # one effect on or off never moves another's draws
    only = audioroom.draws(knobs(aug_reverb=1.0), 11)
    both = audioroom.draws(knobs(aug_reverb=1.0, aug_noise=1.0, aug_speed=0.1), 11)
    assert only["room"] == both["room"]


def test_the_batched_path_gives_each_clip_what_augment_gives_it():
    qs = [clip_levels(0.5 + 0.1 * i, 200.0 + 50 * i) for i in range(3)]
    x = torch.stack([normalised(q) for q in qs])
    p = types.SimpleNamespace(**knobs(aug_reverb=0.7, aug_noise=0.7, aug_pitch=2.0).__dict__,
                              aug_time_mask=8, aug_freq_mask=4, aug_masks=2, aug_freq_shift=1)
    seeds = [sample_seed(0, 2, i) for i in range(3)]
    one = torch.stack([audioaug.augment(xi, p, s) for xi, s in zip(x, seeds, strict=True)])
    assert torch.equal(audioaug.augment_batch(x, p, seeds), one)


def test_off_by_default_and_augmenting_sees_each_key():
    from stages.lib.params import Train

    p = Train()
    assert not audioroom.active(p) and not augmenting(p)
    for key in audioroom.KEYS:
        assert augmenting(Train(**{key: 0.1})), key
    q = clip_levels()
    assert torch.equal(audioaug.augment(normalised(q), Train(), 5), normalised(q))
    # SpecAugment's keys switch the training's augmentation on too (the speech and audio
    # recipes set them: without this they were never applied)
    for key in ("aug_time_mask", "aug_freq_mask", "aug_freq_shift"):
        assert augmenting(Train(**{key: 2})), key


@pytest.mark.parametrize("key, value, words", [
    ("aug_speed", 0.5, "train.aug_speed"),
    ("aug_pitch", -1.0, "train.aug_pitch"),
    ("aug_reverb", 1.5, "train.aug_reverb"),
    ("aug_noise", 2.0, "train.aug_noise"),
    ("aug_gain", 30.0, "train.aug_gain"),
    ("aug_bandlimit", -0.1, "train.aug_bandlimit"),
    ("aug_telephone", 1.2, "train.aug_telephone"),
    ("aug_noise_snr_min", 40.0, "train.aug_noise_snr_min (40.0) must be at most "
                                "train.aug_noise_snr_max (30.0)"),
])
def test_a_bad_range_names_its_key(key, value, words):
    from stages.lib.params import parse_all

    with pytest.raises(StageError) as info:
        parse_all({"train": {key: value}}, "params.yaml")
    assert words in str(info.value)


def test_training_batches_carry_the_effects_and_specaugment():
    """EpochBatches (train's per-sample path) augments audio when only audio keys are on."""
    from stages.lib.params import Train
    from stages.lib.train.augment import EpochBatches
    from stages.tasks.speech import TASK

    x = torch.stack([normalised(clip_levels(0.5 + 0.1 * i)) for i in range(4)])
    y = torch.zeros(4, 3, dtype=torch.int32)
    order = torch.arange(4)
    for p in (Train(aug_reverb=1.0), Train(aug_time_mask=12, aug_freq_mask=6)):
        _, got, _ = EpochBatches(x, y, order, 4, p, 1, TASK)[0]
        want = torch.stack([audioaug.augment(x[i], p, sample_seed(0, 1, i)) for i in range(4)])
        assert torch.equal(got, want) and not torch.equal(got, x)
    _, plain, _ = EpochBatches(x, y, order, 4, Train(), 1, TASK)[0]
    assert torch.equal(plain, x)
