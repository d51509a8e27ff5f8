"""stages/tasks/common/speech_synth.py: libespeak-ng from the espeakng-loader wheel, through ctypes.

espeak-ng keeps global state between calls; each text is synthesized in its own fresh
process, so its bytes depend only on (text, voice variant, rate, pitch). The evidence: the
same texts synthesized in two orders, by one worker and by several, give the same bytes, and
the bytes are pinned by hash (a change of library, data or post-processing shows here)."""
import hashlib

import numpy as np

from stages.tasks.common import speech_synth

JOBS = [("yes", "m3", 160, 50), ("stop", "grandma", 140, 70), ("seven", "klatt", 175, 40),
        ("no", "m3", 160, 50)]


def digest(samples) -> str:
    return hashlib.sha256(np.asarray(samples).tobytes()).hexdigest()


def test_the_wheel_ships_the_library_and_the_voice_variants():
    variants = speech_synth.variants()
    assert len(variants) > 50 and {"m3", "f2", "klatt"} <= set(variants)


def test_bytes_depend_only_on_the_job_not_the_order_nor_the_process():
    import ctypes

    forward = speech_synth.synthesize(JOBS, workers=2)
    for _ in range(3):  # the parent's libc rand() state, which forked children inherit
        ctypes.CDLL(None).rand()
    backward = speech_synth.synthesize(JOBS[::-1], workers=1)[::-1]
    # a job synthesized after others in a run of its own: still the same bytes
    alone = speech_synth.synthesize([JOBS[2]], workers=1)
    assert [digest(x) for x in forward] == [digest(x) for x in backward]
    assert digest(alone[0]) == digest(forward[2])
    for x in forward:
        assert x.dtype == np.int16 and 0.1 * speech_synth.ESPEAK_RATE < len(x)
        assert np.abs(x.astype(np.int32)).max() > 3000  # speech, not silence
    assert digest(forward[0]) != digest(forward[3])  # the text matters
    assert len({digest(x) for x in speech_synth.synthesize(
        [("yes", "m3", 160, 50), ("yes", "m3", 160, 80), ("yes", "f2", 160, 50),
         ("yes", "m3", 120, 50)])}) == 4  # pitch, variant and rate matter


def test_pinned_bytes_of_a_word_and_its_post_processing():
    [raw] = speech_synth.synthesize([("yes", "m3", 160, 50)])
    assert digest(raw) == PINNED_RAW
    out = speech_synth.post_process(raw, 16000, seed=7, gain=0.8, noise=0.003, echo=0.3)
    assert out.dtype == np.dtype("<i2") and len(out) == len(raw) * 16000 // 22050
    assert digest(out) == PINNED_POST
    again = speech_synth.post_process(raw, 16000, seed=7, gain=0.8, noise=0.003, echo=0.3)
    other = speech_synth.post_process(raw, 16000, seed=8, gain=0.8, noise=0.003, echo=0.3)
    assert digest(again) == PINNED_POST and digest(other) != PINNED_POST  # the seed matters
    wav = speech_synth.wav_bytes(out, 16000)
    assert wav[:4] == b"RIFF" and wav[8:12] == b"WAVE" and len(wav) == 44 + 2 * len(out)


PINNED_RAW = "f508f143a69fb826ac9aad16e230aa279c5c7ff0dd297ddb2fbbe0289d740c14"
PINNED_POST = "88fb3ebcd7bf071ac82c9fe0cd4bcac074e1fd6aa9ecbd47b9ddb972e7c7abeb"


def test_every_sample_voice_gives_the_same_bytes_a_second_later():
    import time

    from stages.tasks.audio.sample import VARIANTS

    jobs = [("seven", v, 160, 50) for v in VARIANTS]  # /s/: noise, where unstable ones differ
    first = speech_synth.synthesize(jobs, workers=2)
    time.sleep(1.1)
    again = speech_synth.synthesize(jobs, workers=2)
    moved = [j[1] for j, a, b in zip(jobs, first, again, strict=True) if digest(a) != digest(b)]
    assert not moved, f"voice variants whose bytes depend on the time: {moved}"


def test_every_variant_gives_the_same_bytes_in_any_order_process_and_second():
    """Some variants (f2, f3, f5, whisper, Demonic...) draw breath and flutter from espeak-ng's
    own random generator, which the library seeds from the clock: speech_synth fixes its seed
    (espeak_ng_SetRandSeed), else these differ run to run. Every variant the wheel ships is
    synthesized three times: in order by one worker, reversed by two after the parent's rand()
    moved, and again a second later."""
    import ctypes
    import time

    variants = speech_synth.variants()
    jobs = [("one one two zero", v, 157, 63) for v in variants]
    first = [digest(x) for x in speech_synth.synthesize(jobs, workers=1)]
    for _ in range(5):
        ctypes.CDLL(None).rand()
    time.sleep(1.1)
    second = [digest(x) for x in speech_synth.synthesize(jobs[::-1], workers=2)][::-1]
    assert [v for v, a, b in zip(variants, first, second, strict=True) if a != b] == []


HELD_LOCK = """
import hashlib, os, sys, threading
import numpy as np
from stages.tasks.common import speech_synth

# another thread of this process holds a lock at the moment of any fork, and a forked child
# needs it (as a torch or OpenMP pool's lock, held mid-work, hung a test worker's fork): a
# child forked from this process would wait forever
lock = threading.Lock()
lock.acquire()
os.register_at_fork(after_in_child=lock.acquire)
speech_synth.JOB_TIMEOUT = float(sys.argv[1])
[raw] = speech_synth.synthesize([("yes", "m3", 160, 50)])
print(hashlib.sha256(np.asarray(raw).tobytes()).hexdigest())
"""


def test_a_caller_with_a_held_lock_in_another_thread_still_gets_its_samples():
    """Jobs are forked from a fresh forkserver, never from the caller: a lock that the caller's
    other threads hold at fork time cannot reach them."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    proc = subprocess.run([sys.executable, "-c", HELD_LOCK, "120"], cwd=ROOT, timeout=300,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [PINNED_RAW]


def sleeping_job(args):
    """A job that never finishes (imported by the pool's child from this module)."""
    import time

    time.sleep(120)


def test_a_job_that_never_finishes_is_an_error_naming_its_text(monkeypatch):
    """The per-job deadline: a job that hangs stops synthesize with an error naming its text,
    instead of waiting forever."""
    import pytest

    monkeypatch.setattr(speech_synth, "JOB_TIMEOUT", 2)
    with pytest.raises(RuntimeError, match="espeak-ng did not finish 'seven' "
                                           r"\(voice variant 'klatt'\) within 2 s"):
        speech_synth.synthesize([("seven", "klatt", 175, 40)], target=sleeping_job)
