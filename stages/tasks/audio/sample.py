"""The built-in sample: 20 spoken command words (Speech Commands' core words), synthesized by
two synthesizers of different make (stages/tasks/common/synth_render.py): libespeak-ng's voice
variants and Festival's three English voices (Debian's `festival`), byte for byte the same on
every machine with the pinned versions.

Each clip is `<word>/<voice>_nohash_<k>.wav`: one of VARIANTS (espeak-ng's voice variants:
formants, breathiness, pitch range) in its k-th rendition, or one of Festival's voices in
FESTIVAL_RENDITIONS renditions. A rendition's rate, pitch, gain, noise level and echo come from
a PCG64 generator seeded by (word, voice, k), so a clip does not depend on which others are
written. The voice is the clip's speaker (the name before `_nohash_`, as in Speech Commands)
and so its group. The sample writes Speech Commands' own split lists (validation_list.txt,
testing_list.txt: `split.by: given`): HELD_OUT's espeak-ng voices are val and test, never
heard in training, and every Festival voice trains, so that the model hears speech of more
than one make; a synthesizer in neither (bench/speech_peer.py --other flite) measures speech
of another make.
"""
import hashlib

from stages.tasks.audio.annotations import NOHASH, SPLIT_LISTS

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
FESTIVAL_RENDITIONS = 8  # Festival has three voices: each speaks every word this many times
SAMPLE_RATE = 16000
# the voices of val and test (SPLIT_LISTS' files; the rest train): espeak-ng variants whose
# clips the sample's hash split held out before it gave its own lists, so its figures compare
HELD_OUT = {"val": ("Denis", "Michael", "anika", "announcer", "benjamin", "caleb", "iven3",
                    "pedro", "steph2", "travis"),
            "test": ("Alex", "AnxiousAndy", "Diogo", "Gene", "Mario", "Mike", "belinda", "david",
                     "f4", "klatt4", "m2", "m7", "marcelo", "michel", "paul", "robert")}


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


def items(per_class: int = 0) -> list[tuple[str, str, str, int]]:
    """(synth, word, voice, k) of every clip, in the sample's order: every word, espeak-ng's
    renditions (k) of its variants, then Festival's voices' renditions. per_class > 0 keeps the
    first N clips of each word (N espeak-ng variants first)."""
    from stages.tasks.common import festival_synth

    out = []
    for word in WORDS:
        mine = [("espeak", word, v, k) for k in range(RENDITIONS) for v in VARIANTS]
        mine += [("festival", word, v, k) for k in range(FESTIVAL_RENDITIONS)
                 for v in festival_synth.VOICES]
        out += mine[:per_class] if per_class else mine
    return out


def rendered(part, workers: int = 2):
    """(relative path, WAV bytes) of each (synth, word, voice, k) of items, in order."""
    from stages.tasks.common import synth_render

    plans = [{"synth": synth, "text": word, "voice": voice, **rendition(word, voice, k)}
             for synth, word, voice, k in part]
    data = synth_render.render(plans, SAMPLE_RATE, workers)
    return [(f"{word}/{voice}{NOHASH}{k}.wav", wav)
            for (_, word, voice, k), wav in zip(part, data, strict=True)]


def clips(per_class: int = 0, workers: int = 2, chunk: int = 400):
    """Yield (relative path, WAV bytes) in items' order, rendered `chunk` at a time, then
    Speech Commands' split lists (HELD_OUT's voices among the clips written)."""
    from stages.tasks.common import festival_synth

    plan = items(per_class)
    if any(synth == "festival" for synth, _, _, _ in plan):
        festival_synth.require("the built-in keyword sample")
    held = {v: split for split, voices in HELD_OUT.items() for v in voices}
    lists = {split: [] for split in HELD_OUT}
    for start in range(0, len(plan), chunk):
        part = plan[start:start + chunk]
        for (synth, _, voice, _), (rel, wav) in zip(part, rendered(part, workers), strict=True):
            if synth == "espeak" and voice in held:
                lists[held[voice]].append(rel)
            yield rel, wav
    for name, split in SPLIT_LISTS.items():
        yield name, "".join(f"{rel}\n" for rel in sorted(lists[split])).encode()
