"""The built-in speech sample: spoken digit strings ("four one nine", 2 to 6 digits), synthesized
by espeak-ng (stages/tasks/common/speech_synth.py: the espeakng-loader wheel's library and voice
variants, a fresh process per clip), varied by voice variant, rate, pitch and gain, with seeded
noise and, for half the clips, a simple room echo; 16 kHz mono 16-bit WAV.

It is written in Common Voice's layout (clips/ and train.tsv, dev.tsv, test.tsv with
client_id, path, sentence): the client is the voice variant, so it is the group, and the
split is given by voice. The voices of the test split (and of dev, the validation split) are
never heard in training: the test measures unseen voices.

Every clip's settings are a function of its index alone (a PCG64 generator seeded with
(SEED, index)), so the first clips of a smaller sample are the same bytes as a larger one's.
"""
import numpy as np

CLIPS = 2000  # clips written when sample.clips is 0
SEED = 20261206
RATE = 16000
MAX_SECONDS = 3.2  # the longest clip (6 digits at the slowest rate) is shorter; the features'
FRAMES = 321  # length: (FRAMES - 1) * 160 samples at 16 kHz = MAX_SECONDS
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
DIGITS = (2, 6)  # digits per clip, both included
CHARSET = "abcdefghijklmnopqrstuvwxyz "  # validate.charset of the sample: lower case, spaces
SPEECH_RATE = (140, 220)  # espeak-ng words per minute
PITCH = (20, 80)  # espeak-ng's 0-99
GAIN = (0.4, 1.1)
NOISE = (0.001, 0.01)  # white noise RMS, full scale 1.0
ECHO = (0.15, 0.4)  # the room's reflection decay, for half the clips
# the voice variants held out of training (a seeded draw from the plain English ones, fixed)
HELD_OUT = {"test": ("Denis", "david", "ed", "f4", "f5", "klatt3", "m1", "m8"),
            "val": ("Gene", "anika", "linda", "max")}
SHARE = {"test": 2, "val": 1}  # of every 10 clips: the test and val ones, the rest train
SPLIT_FILES = {"train": "train.tsv", "val": "dev.tsv", "test": "test.tsv"}


def voices_by_split(variants: list) -> dict:
    """{split: voice variants}: test and val speak with HELD_OUT's plain English voices (no
    whisper, robot or croak), never heard in training; train with every other variant the
    wheel ships, the odd ones included (more voices to learn from)."""
    missing = sorted(v for split in HELD_OUT.values() for v in split if v not in variants)
    if missing:
        raise RuntimeError(f"the espeak-ng wheel has no voice variant {', '.join(missing)}")
    held = {split: list(voices) for split, voices in HELD_OUT.items()}
    return {**held, "train": sorted(set(variants) - set(held["test"]) - set(held["val"]))}


def split_of(index: int) -> str:
    k = index % 10
    return "test" if k < SHARE["test"] else "val" if k < SHARE["test"] + SHARE["val"] else "train"


def plan(index: int, voices: dict) -> dict:
    """Everything about clip `index`, from (SEED, index) alone."""
    rng = np.random.Generator(np.random.PCG64([SEED, index]))
    split = split_of(index)
    digits = rng.integers(0, 10, int(rng.integers(DIGITS[0], DIGITS[1] + 1)))
    pool = voices[split]
    return {"split": split, "text": " ".join(WORDS[d] for d in digits),
            "voice": pool[int(rng.integers(len(pool)))],
            "rate": int(rng.integers(SPEECH_RATE[0], SPEECH_RATE[1] + 1)),
            "pitch": int(rng.integers(PITCH[0], PITCH[1] + 1)),
            "gain": float(rng.uniform(*GAIN)), "noise": float(rng.uniform(*NOISE)),
            "echo": float(rng.uniform(*ECHO)) if rng.random() < 0.5 else 0.0,
            "seed": int(rng.integers(2**32))}


def clips(n: int = CLIPS, workers: int = 0):
    """Yield (relative path, bytes): n clips (clips/NNNNN.wav), then the three lists."""
    import os

    from stages.tasks.common import speech_synth

    voices = voices_by_split(speech_synth.variants())
    plans = [plan(i, voices) for i in range(n)]
    raw = speech_synth.synthesize([(p["text"], p["voice"], p["rate"], p["pitch"])
                                   for p in plans], workers or min(4, os.cpu_count() or 1))
    rows = {split: [] for split in SPLIT_FILES}
    for i, (p, samples) in enumerate(zip(plans, raw, strict=True)):
        wave = speech_synth.post_process(samples, RATE, p["seed"], p["gain"], p["noise"],
                                         p["echo"])
        if len(wave) > MAX_SECONDS * RATE:
            raise RuntimeError(f"sample clip {i} ({p}) is {len(wave) / RATE:.2f} s, longer "
                               f"than MAX_SECONDS {MAX_SECONDS}")
        name = f"{i:05d}.wav"
        rows[p["split"]].append(f"{p['voice']}\t{name}\t{p['text']}\n")
        yield f"clips/{name}", speech_synth.wav_bytes(wave, RATE)
    for split, file in SPLIT_FILES.items():
        yield file, ("client_id\tpath\tsentence\n" + "".join(rows[split])).encode()
