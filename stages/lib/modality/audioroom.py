"""The room and the microphone, as training augmentation of the stored log-mel (issue 55):
speed and pitch perturbation, reverberation, gain, background noise at an SNR, band-limiting
and a telephone-like codec, each seeded per (seed, epoch, index) like SpecAugment
(stages/lib/modality/audioaug.py runs these first, then its masks).

Why on the spectrogram: the shards hold each clip's quantised log-mel (audiocore.py), not its
samples, and train reads only the shards (DVC tracks them; re-decoding and re-featurising every
clip every epoch would cost more than the training on 2 cores). Each effect is the standard
power-spectrogram approximation of what it does to the waveform:

- the stored input is exactly invertible: every clip's cells are uint8 levels q (255 at its
  loudest cell, 80 dB below at 0), normalised as (q / 255 - mean) / std, so the smallest gap
  between two distinct values is one level and the largest value is level 255: `levels`
  recovers q without knowing mean and std, and `relevel` writes the result back on the same
  grid (quantised as prepare quantises: dB relative to the new loudest cell, 80 dB range);
- speed s: the time axis resampled about the clip's centre by s and every frequency scaled by
  s (a faster clip is higher); pitch: frequencies scaled by 2^(k/12), time kept. A band's new
  power is read at its centre frequency divided by the factor, linearly between band centres
  on the mel axis (below the first band: the first band; above the last: silence);
- reverberation: each band's power convolved along time with the mel power envelope of one
  of N_ROOMS impulse responses generated here (exponentially decaying Gaussian noise after a
  direct impulse, RT60 from 0.2 to 0.9 s, numpy's PCG64 seeded by the room's number: no files);
- gain: the speech scaled by g dB before the noise; the stored log-mel is relative to the
  clip's loudest cell, so a gain alone changes nothing: it moves the speech against the noise;
- noise: coloured noise (power falling as f^-a, a from 0 (white) to 2 (brown), each cell
  jittered by 1.5 dB) at an SNR drawn from [aug_noise_snr_min, aug_noise_snr_max] dB, the
  powers of the whole clip compared;
- band-limiting: a band-pass of Butterworth order 4 (power response 1 / (1 + (lo/f)^8) /
  (1 + (f/hi)^8)) with lo drawn in [0, 400] Hz and hi in [3000, 8000] Hz;
- telephone: band-pass 300-3400 Hz (as above), then mu-law 8-bit quantisation at 8 kHz:
  white noise 38 dB below each frame's power (G.711's signal-to-quantisation ratio), nothing
  above 4 kHz.

The frequencies are those of the modality's default spec (16 kHz, hop 10 ms, the mel scale of
audiocore.mel_matrix); a model trained at another sample rate gets the same effects placed as
if its clips were at 16 kHz. Every draw comes from one generator seeded by the sample's seed
(plus DRAW_SALT: not SpecAugment's stream), always the same count in the same order (DRAWS), so
switching one effect on or off never moves another's numbers. numpy float64 throughout; the
result is rounded back to the levels, so the last bits of a CPU's exp or FFT do not reach the
model.
"""
import functools

import numpy as np

N_ROOMS = 8  # the generated impulse responses
RT60 = (0.2, 0.9)  # their reverberation times, seconds, evenly spaced
DIRECT_TO_REVERB_DB = 0.0  # the direct impulse's energy against the decaying tail's
RATE, HOP, N_FFT = 16000, 160, 512  # the default spec's (audiospec.AudioSpec)
FLOOR = 1e-8  # power of level 0: 80 dB below the loudest cell
RANGE_DB = 80.0  # audiocore.AUDIO_RANGE_DB
BAND = (400.0, 3000.0, 8000.0)  # band-limiting: lo in [0, 400] Hz, hi in [3000, 8000] Hz
PHONE = (300.0, 3400.0, 4000.0, 38.0)  # band-pass, the 8 kHz codec's Nyquist, its SNR (dB)
JITTER_DB = 1.5  # the noise's per-cell spread
# the uniform draws, in order: speed, pitch, reverb gate, room, gain, noise gate, snr, colour,
# band gate, lo, hi, telephone gate (the noise's cell jitter: a second generator from the seed)
DRAWS = 12
# the generators' seeds: the sample's seed plus these (SpecAugment's is the seed itself), so
# no two streams of one sample start alike
DRAW_SALT, NOISE_SALT = 1, 2
KEYS = ("aug_speed", "aug_pitch", "aug_reverb", "aug_gain", "aug_noise", "aug_bandlimit",
        "aug_telephone")
# the audio and speech recipes' values (tools.init and the built-in samples; docs/speech.md):
# trained with them, a model hears voices of another synthesizer far better (Festival: keyword
# top-1 0.104 -> 0.275, speech greedy CER 0.440 -> 0.205) at a small cost on its own
# synthesizer's held-out voices
RECIPE = {"train.aug_speed": 0.1, "train.aug_pitch": 2.0, "train.aug_reverb": 0.3,
          "train.aug_noise": 0.3, "train.aug_gain": 6.0, "train.aug_bandlimit": 0.2,
          "train.aug_telephone": 0.1}


def knobs(p) -> dict:
    """train's room and microphone params (0 = off; read with defaults, as audioaug.knobs)."""
    out = {k: float(getattr(p, k, 0.0)) for k in KEYS}
    out["snr"] = (float(getattr(p, "aug_noise_snr_min", 5.0)),
                  float(getattr(p, "aug_noise_snr_max", 30.0)))
    return out


def active(p) -> bool:
    k = knobs(p)
    return any(k[name] > 0 for name in KEYS)


def draws(p, seed: int) -> dict:
    """The effects one sample gets, from DRAWS uniform numbers of a generator seeded by seed:
    {"speed": factor, "pitch": factor, "room": index or None, "gain_db", "snr_db" or None,
    "colour": noise exponent, "band": (lo, hi) or None, "telephone": bool}."""
    import torch

    k = knobs(p)
    u = torch.rand(DRAWS, generator=torch.Generator().manual_seed(seed + DRAW_SALT),
                   dtype=torch.float64).tolist()
    lo, hi = k["snr"]
    return {"speed": 1.0 + k["aug_speed"] * (2 * u[0] - 1),
            "pitch": 2.0 ** (k["aug_pitch"] * (2 * u[1] - 1) / 12.0),
            "room": min(int(u[3] * N_ROOMS), N_ROOMS - 1) if u[2] < k["aug_reverb"] else None,
            "gain_db": k["aug_gain"] * (2 * u[4] - 1),
            "snr_db": lo + (hi - lo) * u[6] if u[5] < k["aug_noise"] else None,
            "colour": 2.0 * u[7],
            "band": (BAND[0] * u[9], BAND[1] + (BAND[2] - BAND[1]) * u[10])
            if u[8] < k["aug_bandlimit"] else None,
            "telephone": u[11] < k["aug_telephone"]}


# ---- the stored levels and back

def levels(x: np.ndarray):
    """(uint8-valued levels as float64, the loudest value, one level's step) of one clip's
    normalised values, or None when they hold fewer than two distinct values."""
    vals = np.unique(x)
    if len(vals) < 2:
        return None
    step = float(np.diff(vals).min())
    top = float(vals[-1])
    q = np.clip(np.round((x - top) / step) + 255.0, 0.0, 255.0)
    below = q - 255.0  # the step refitted over every cell (least squares): float32's rounding
    step = float(np.sum((x - top) * below) / np.sum(below * below))  # of one gap averaged out
    return q, top, step


def relevel(power: np.ndarray, top: float, step: float) -> np.ndarray:
    """Mel power -> normalised values on the clip's grid: dB relative to the loudest cell,
    RANGE_DB mapped to 0..255 and rounded (audiocore.quantise), then top + (q - 255) * step."""
    db = 10.0 * np.log10(np.maximum(power, 1e-30))
    db = np.clip(db - db.max(), -RANGE_DB, 0.0)
    q = np.round((db + RANGE_DB) * (255.0 / RANGE_DB))
    return top + (q - 255.0) * step


def to_power(q: np.ndarray) -> np.ndarray:
    return 10.0 ** ((q * (RANGE_DB / 255.0) - RANGE_DB) / 10.0)


# ---- the effects on mel power, bands x frames

@functools.lru_cache(maxsize=8)
def centres(n_mels: int) -> np.ndarray:
    """The mel bands' centre frequencies (Hz) at the default spec (audiocore.mel_matrix)."""
    from stages.lib.modality.audiocore import F_MIN

    mel = 2595.0 * np.log10(1.0 + np.array([F_MIN, RATE / 2]) / 700.0)
    m = np.linspace(mel[0], mel[1], n_mels + 2)[1:-1]
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


def warp(power: np.ndarray, factor: float) -> np.ndarray:
    """Every frequency scaled by factor: band m reads the power at centre_m / factor."""
    if factor == 1.0:
        return power
    c = centres(power.shape[0])
    mel = np.log10(1.0 + c / 700.0)
    at = np.log10(1.0 + (c / factor) / 700.0)
    out = np.empty_like(power)
    for t in range(power.shape[1]):
        out[:, t] = np.interp(at, mel, power[:, t], left=power[0, t], right=FLOOR)
    return out


def stretch(power: np.ndarray, speed: float) -> np.ndarray:
    """The time axis played `speed` times as fast about the clip's centre (frames outside:
    silence)."""
    if speed == 1.0:
        return power
    frames = power.shape[1]
    mid = (frames - 1) / 2.0
    at = mid + (np.arange(frames) - mid) * speed
    out = np.empty_like(power)
    for m in range(power.shape[0]):
        out[m] = np.interp(at, np.arange(frames), power[m], left=FLOOR, right=FLOOR)
    return out


@functools.lru_cache(maxsize=N_ROOMS)
def impulse(room: int) -> np.ndarray:
    """Room `room`'s impulse response at RATE: a direct impulse, then Gaussian noise (PCG64
    seeded by the room's number) decaying 60 dB over its RT60, its energy DIRECT_TO_REVERB_DB
    below the direct impulse's."""
    rt60 = RT60[0] + (RT60[1] - RT60[0]) * room / (N_ROOMS - 1)
    n = int(rt60 * RATE)
    tail = np.random.Generator(np.random.PCG64(room)).standard_normal(n)
    tail *= np.exp(-np.log(1000.0) * np.arange(n) / n)  # amplitude: -60 dB at rt60
    tail *= np.sqrt(10.0 ** (-DIRECT_TO_REVERB_DB / 10.0) / np.sum(tail ** 2))
    return np.concatenate([[1.0], tail])


@functools.lru_cache(maxsize=4 * N_ROOMS)
def room_envelope(room: int, n_mels: int) -> np.ndarray:
    """n_mels x K: the impulse response's mel power per hop (frames of N_FFT samples, Hann
    window, starting at 0): what one frame of sound leaves in each following frame."""
    from stages.lib.modality.audiocore import mel_matrix

    h = impulse(room)
    k = 1 + len(h) // HOP
    y = np.concatenate([h, np.zeros(k * HOP + N_FFT - len(h))])
    frames = np.stack([y[i * HOP:i * HOP + N_FFT] for i in range(k)])
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2
    env = (power @ mel_matrix(RATE, N_FFT, n_mels)).T
    return env / env[:, :1]  # the direct frame 1 in every band


def reverb(power: np.ndarray, room: int) -> np.ndarray:
    env = room_envelope(room, power.shape[0])
    frames = power.shape[1]
    return np.stack([np.convolve(power[m], env[m])[:frames] for m in range(power.shape[0])])


def band_gain(n_mels: int, lo: float, hi: float) -> np.ndarray:
    """The power response of a Butterworth band-pass of order 4 at the band centres."""
    f = centres(n_mels)
    low = 1.0 / (1.0 + (lo / f) ** 8) if lo > 0 else np.ones_like(f)
    return low / (1.0 + (f / hi) ** 8)


@functools.lru_cache(maxsize=8)
def white(n_mels: int) -> np.ndarray:
    """Each band's share of white noise's power (its filter's weight summed over FFT bins)."""
    from stages.lib.modality.audiocore import mel_matrix

    w = mel_matrix(RATE, N_FFT, n_mels).sum(axis=0)
    return w / w.sum()


def noise(power: np.ndarray, snr_db: float, colour: float, seed: int) -> np.ndarray:
    """Coloured noise whose clip power is snr_db below power's: f^-colour over the white share,
    each cell jittered by JITTER_DB (normal, a generator seeded by seed + NOISE_SALT)."""
    import torch

    shape = white(power.shape[0]) * (centres(power.shape[0]) / 1000.0) ** -colour
    z = torch.randn(power.shape, generator=torch.Generator().manual_seed(seed + NOISE_SALT),
                    dtype=torch.float64).numpy()
    n = shape[:, None] * 10.0 ** (JITTER_DB * z / 10.0)
    return n * (power.sum() / n.sum() * 10.0 ** (-snr_db / 10.0))


def telephone(power: np.ndarray) -> np.ndarray:
    lo, hi, nyquist, snr = PHONE
    out = power * band_gain(power.shape[0], lo, hi)[:, None]
    shape = white(power.shape[0]) * (centres(power.shape[0]) < nyquist)
    return out + shape[:, None] * out.sum(axis=0)[None] / shape.sum() * 10.0 ** (-snr / 10.0)


def apply(power: np.ndarray, d: dict, seed: int) -> np.ndarray:
    """The effects of draws() on mel power, bands x frames, in the order sound meets them:
    the speaker's (speed, pitch), the room's, the level and the noise, the microphone's."""
    power = warp(stretch(power, d["speed"]), d["speed"])
    power = warp(power, d["pitch"])
    if d["room"] is not None:
        power = reverb(power, d["room"])
    if d["snr_db"] is not None:
        power = power * 10.0 ** (d["gain_db"] / 10.0) + noise(power, d["snr_db"], d["colour"],
                                                              seed)
    if d["band"] is not None:
        power = power * band_gain(power.shape[0], *d["band"])[:, None]
    if d["telephone"]:
        power = telephone(power)
    return power


def augment(x, p, seed: int):
    """The room and microphone effects on one normalised 1 x n_mels x frames tensor (any
    device; computed on the CPU in float64), on the clip's own level grid; x unchanged when
    every effect is off or the clip holds a single value."""
    import torch

    if not active(p):
        return x
    arr = x.detach().cpu().numpy().astype(np.float64)
    found = levels(arr[0])
    if found is None:
        return x
    q, top, step = found
    out = relevel(apply(to_power(q), draws(p, seed), seed), top, step)
    return torch.from_numpy(out[None]).to(dtype=x.dtype, device=x.device)
