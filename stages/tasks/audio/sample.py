"""The built-in sample: 20 spoken command words (Speech Commands' core words), synthesized with
libespeak-ng (stages/tasks/common/speech_synth.py), byte for byte the same on every machine.

Each clip is `<word>/<variant>_nohash_<k>.wav`: one of VARIANTS (espeak-ng's voice variants:
formants, breathiness, pitch range), k-th rendition. A rendition's rate, pitch, gain, noise
level and echo come from a PCG64 generator seeded by (word, variant, k), so a clip does not
depend on which others are written. The voice variant is the clip's speaker (the name before
`_nohash_`, as in Speech Commands) and so its group: the split keeps each variant's clips in
one split, and the test split's voices are never heard in training.
"""
import hashlib

from stages.tasks.audio.annotations import NOHASH

WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go",
         "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
# espeak-ng's voice variants, in a fixed order: not the whispered, robotic and croaking ones,
# nor the nine whose samples change from one second to the next (f2, f3, f5, Alicia, sandro,
# victor, Demonic, whisper, whisperf: libespeak-ng 1.52 draws their noise from a time-seeded
# source; tests/test_speech_synth.py synthesizes every variant here twice, a second apart)
VARIANTS = ("m1", "f1", "m2", "grandma", "m3", "announcer", "m4", "f4", "m5", "kaukovalta",
            "m6", "m7", "m8",
            "klatt", "klatt2", "klatt3", "klatt4", "Alex", "Andy", "Annie", "Denis", "Gene",
            "Lee", "Michael", "Mike", "Storm", "adam", "anika", "aunty", "belinda", "benjamin",
            "boris", "caleb", "david", "ed", "edward", "iven", "john", "linda", "max",
            "AnxiousAndy", "Andrea", "Diogo", "Gene2", "Henrique", "Hugo", "Jacky", "Marco",
            "Mario",
            "Nguyen", "Reed", "antonio", "edward2", "gustave", "ian", "iven2", "iven3", "iven4",
            "klatt5", "klatt6", "marcelo", "michel", "miguel", "mike2", "norbert", "pablo",
            "paul", "pedro", "quincy", "rob", "robert", "fast", "shelby", "steph", "steph2",
            "steph3", "travis", "Tweaky", "zac", "grandpa")
RENDITIONS = 1  # more voices teach more than more renditions of one voice (docs/speech.md)
SAMPLE_RATE = 16000


def rendition(word: str, variant: str, k: int) -> dict:
    """The seeded choices of one clip: rate (words per minute), pitch (0-99), gain, noise RMS,
    echo decay, and the noise seed."""
    import numpy as np

    seed = int.from_bytes(hashlib.sha256(f"{word}\0{variant}\0{k}".encode()).digest()[:8],
                          "little")
    u = np.random.Generator(np.random.PCG64(seed)).random(5)
    return {"rate": int(130 + 70 * u[0]), "pitch": int(25 + 50 * u[1]),
            "gain": round(0.35 + 0.6 * u[2], 4), "noise": round(0.001 + 0.008 * u[3], 5),
            "echo": round(0.4 * u[4], 4), "seed": seed}


def clips(per_class: int = 0, workers: int = 2):
    """Yield (relative path, WAV bytes) in a fixed order: every word, its renditions (k), its
    variants. per_class > 0 keeps the first N clips of each word (N variants of the first
    rendition first)."""
    from stages.tasks.common import speech_synth

    plan = []
    for word in WORDS:
        items = [(word, v, k) for k in range(RENDITIONS) for v in VARIANTS]
        plan += items[:per_class] if per_class else items
    choices = [rendition(*item) for item in plan]
    raw = speech_synth.synthesize([(w, v, c["rate"], c["pitch"])
                                   for (w, v, _), c in zip(plan, choices, strict=True)],
                                  workers=workers)
    for (word, variant, k), c, samples in zip(plan, choices, raw, strict=True):
        out = speech_synth.post_process(samples, SAMPLE_RATE, c["seed"], gain=c["gain"],
                                        noise=c["noise"], echo=c["echo"])
        yield f"{word}/{variant}{NOHASH}{k}.wav", speech_synth.wav_bytes(out, SAMPLE_RATE)
