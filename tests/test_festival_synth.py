"""stages/tasks/common/festival_synth.py: Debian's Festival and its three English voices, a fresh
process per text. The evidence that a clip's bytes depend on its job alone: the same jobs in two
orders, by one worker and by two, give the same bytes; each voice's clip is pinned by hash, raw
and post-processed (a change of Festival, a voice package or the post-processing shows here:
the pins hold for festival 1:2.5.0-9, festvox-kallpc16k 2.4-1, festvox-kdlpc16k 1.4.0-6.1 and
festvox-us-slt-hts 0.2010.10.25-4, the versions .ci/run installs)."""
import hashlib

import numpy as np
import pytest

from stages.tasks.common import festival_synth, speech_synth

PINNED = {  # voice: (played rate, sha256 of the raw samples, of the post-processed ones)
    "kal_diphone": (16800, "bbc2f76243e10f4006d574be11c0c52ddedbe41ce034757e783b4feb40cefe7a",
                    "8315eda56fa697abdb256a1fd89e2274a2c3e72a0e3e33f88b6050b15f274140"),
    "ked_diphone": (16800, "b5d35fb66f2dba4a4bcba6f84049912151915bee8cc61d9a4d35d38191159fcf",
                    "5cd433fe6a957e7d0060206cd20efd3ce8b0600b2b1c01b4c98d2d78ae4ac42f"),
    "cmu_us_slt_arctic_hts": (
        33500, "3deded91b8edebe249202bc5063aab881a01e3dd79e25e670aaa668fb98d2627",
        "7df094fccec765294b2e16595144585c77f3a3debfded4d968b155927642a998"),
}


pytestmark = pytest.mark.usefixtures("festival_installed")


def digest(samples) -> str:
    return hashlib.sha256(np.asarray(samples).tobytes()).hexdigest()


def test_each_voice_gives_its_pinned_bytes_raw_and_post_processed():
    jobs = [("seven two", v, 160, 60) for v in festival_synth.VOICES]
    for (_, voice, _, _), (raw, rate) in zip(jobs, festival_synth.synthesize(jobs, 2),
                                             strict=True):
        assert raw.dtype == np.dtype("<i2") and np.abs(raw.astype(np.int32)).max() > 3000
        post = speech_synth.post_process(raw, 16000, 7, 0.8, 0.003, 0.3, source_rate=rate)
        assert (rate, digest(raw), digest(post)) == PINNED[voice], voice
        assert abs(len(post) - len(raw) * 16000 / rate) <= 1


def test_bytes_depend_only_on_the_job_not_the_order_nor_the_worker_count():
    jobs = [(text, voice, rate, pitch) for voice in festival_synth.VOICES
            for text, rate, pitch in (("four one", 140, 20), ("nine", 210, 75))]
    forward = festival_synth.synthesize(jobs, workers=2)
    backward = festival_synth.synthesize(jobs[::-1], workers=1)[::-1]
    assert [(digest(x), r) for x, r in forward] == [(digest(x), r) for x, r in backward]
    assert len({digest(x) for x, _ in forward}) == len(jobs)  # text, voice and draw matter


def test_rate_stretches_and_pitch_moves_the_played_rate():
    base, slow, high = festival_synth.synthesize(
        [("three three", "kal_diphone", 175, 50), ("three three", "kal_diphone", 125, 50),
         ("three three", "kal_diphone", 175, 80)])
    seconds = [len(x) / r for x, r in (base, slow, high)]
    assert base[1] == 16000 and high[1] > 16000 and slow[1] == 16000
    assert seconds[1] == pytest.approx(seconds[0] * 175 / 125, rel=0.1)
    assert seconds[2] == pytest.approx(seconds[0], rel=0.1)  # pitch up, the rate held


def test_quotes_and_backslashes_in_a_text_reach_festival_as_text():
    [(x, _)] = festival_synth.synthesize([('say "one" \\ two', "ked_diphone", 175, 50)])
    assert len(x) > 0.5 * 16000


def test_an_unknown_or_missing_voice_is_an_error_naming_the_fix(monkeypatch):
    with pytest.raises(RuntimeError, match="no voice rab_diphone.*kal_diphone"):
        festival_synth.synthesize([("one", "rab_diphone", 175, 50)])
    monkeypatch.setattr(festival_synth, "voices", lambda: ["kal_diphone"])
    with pytest.raises(RuntimeError, match="ked_diphone is not installed: apt-get install -y "
                                           "festvox-kdlpc16k"):
        festival_synth.synthesize([("one", "ked_diphone", 175, 50)])


def test_no_festival_program_names_the_packages(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RuntimeError, match="apt-get install -y festival festvox-kallpc16k "
                                           "festvox-kdlpc16k festvox-us-slt-hts"):
        festival_synth.synthesize([("one", "kal_diphone", 175, 50)])
