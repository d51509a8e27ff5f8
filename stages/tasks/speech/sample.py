"""The built-in speech sample: spoken digit strings ("four one nine", 2 to 6 digits), synthesized
by two synthesizers of different make (stages/tasks/common/synth_render.py): espeak-ng (the
espeakng-loader wheel's library and voice variants) and Festival (Debian's `festival` and its
three English voices: a diphone pair and an HTS voice), a fresh process per clip, varied by
voice, rate, pitch and gain, with seeded noise and, for half the clips, a simple room echo;
16 kHz mono 16-bit WAV.

It is written in Common Voice's layout (clips/ and train.tsv, dev.tsv, test.tsv with
client_id, path, sentence, then synth and voice): the client is the voice, so it is the group,
and the split is given by voice. The voices of the test split (and of dev, the validation
split) are espeak-ng voices never heard in training: the test measures unseen voices. Every
Festival voice trains (FESTIVAL_SHARE of the train clips), so that the model hears speech of
more than one make; a synthesizer that is in neither (bench/speech_peer.py --other flite)
measures speech of another make.

Every clip's settings are a function of its index alone (PCG64 generators seeded with (SEED,
index) and (SEED, index, 1)), so the first clips of a smaller sample are the same bytes as a
larger one's, and the test and val clips are the same whatever the train clips' synthesizer.
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
COLUMNS = ("client_id", "path", "sentence", "synth", "voice")
FESTIVAL_SHARE = 0.4  # of the train clips: spoken by one of Festival's voices
# Festival's words a minute: its HTS voice speaks six "seven"s in 3.6 s at 140, past MAX_SECONDS
FESTIVAL_RATE = (170, 220)


def voices_by_split(variants: list) -> dict:
    """{split: espeak-ng voice variants, "festival": Festival's voices}: test and val speak with
    HELD_OUT's plain English voices (no whisper, robot or croak), never heard in training;
    train with every other variant the wheel ships, the odd ones included (more voices to
    learn from), and with every one of Festival's (all of them installed, or a StageError naming
    the packages)."""
    from stages.tasks.common import festival_synth

    missing = sorted(v for split in HELD_OUT.values() for v in split if v not in variants)
    if missing:
        raise RuntimeError(f"the espeak-ng wheel has no voice variant {', '.join(missing)}")
    festival_synth.require("the built-in speech sample")
    held = {split: list(voices) for split, voices in HELD_OUT.items()}
    return {**held, "train": sorted(set(variants) - set(held["test"]) - set(held["val"])),
            "festival": list(festival_synth.VOICES)}


def split_of(index: int) -> str:
    k = index % 10
    return "test" if k < SHARE["test"] else "val" if k < SHARE["test"] + SHARE["val"] else "train"


def plan(index: int, voices: dict) -> dict:
    """Everything about clip `index`, from (SEED, index) alone."""
    rng = np.random.Generator(np.random.PCG64([SEED, index]))
    split = split_of(index)
    digits = rng.integers(0, 10, int(rng.integers(DIGITS[0], DIGITS[1] + 1)))
    pool = voices[split]
    out = {"split": split, "synth": "espeak", "text": " ".join(WORDS[d] for d in digits),
           "voice": pool[int(rng.integers(len(pool)))],
           "rate": int(rng.integers(SPEECH_RATE[0], SPEECH_RATE[1] + 1)),
           "pitch": int(rng.integers(PITCH[0], PITCH[1] + 1)),
           "gain": float(rng.uniform(*GAIN)), "noise": float(rng.uniform(*NOISE)),
           "echo": float(rng.uniform(*ECHO)) if rng.random() < 0.5 else 0.0,
           "seed": int(rng.integers(2**32))}
    if split == "train":  # its own generator: the espeak-ng draws above stay as they are
        other = np.random.Generator(np.random.PCG64([SEED, index, 1]))
        if other.random() < FESTIVAL_SHARE:
            festival = voices["festival"]
            out.update(synth="festival", voice=festival[int(other.integers(len(festival)))],
                       rate=int(other.integers(FESTIVAL_RATE[0], FESTIVAL_RATE[1] + 1)))
    return out


def rendered(plans, workers: int, chunk: int = 200):
    """(index, plan, WAV bytes) of each plan in order, rendered `chunk` at a time (memory holds
    one chunk's clips, not the sample's)."""
    from stages.tasks.common import synth_render

    for start in range(0, len(plans), chunk):
        part = plans[start:start + chunk]
        for k, (p, wav) in enumerate(zip(part, synth_render.render(part, RATE, workers),
                                         strict=True)):
            yield start + k, p, wav


def clips(n: int = CLIPS, workers: int = 0):
    """Yield (relative path, bytes): n clips (clips/NNNNN.wav), then the three lists."""
    import os

    from stages.tasks.common import speech_synth

    voices = voices_by_split(speech_synth.variants())
    plans = [plan(i, voices) for i in range(n)]
    workers = workers or min(4, os.cpu_count() or 1)
    rows = {split: [] for split in SPLIT_FILES}
    for i, p, wav in rendered(plans, workers):
        seconds = (len(wav) - 44) / 2 / RATE  # 16-bit mono after the 44-byte header
        if seconds > MAX_SECONDS:
            raise RuntimeError(f"sample clip {i} ({p}) is {seconds:.2f} s, longer than "
                               f"MAX_SECONDS {MAX_SECONDS}")
        name = f"{i:05d}.wav"
        rows[p["split"]].append("\t".join((p["voice"], name, p["text"], p["synth"],
                                           p["voice"])) + "\n")
        yield f"clips/{name}", wav
    for split, file in SPLIT_FILES.items():
        yield file, ("\t".join(COLUMNS) + "\n" + "".join(rows[split])).encode()
