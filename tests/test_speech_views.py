"""Test-time views of a stored clip (stages/lib/modality/audioviews.py) against their definition
and a reference on a few seeds; the speech task's confidence of them
(stages/tasks/speech/views.py) and the lexicon's decode reading the views' outputs."""
import math

import numpy as np
import pytest

from stages.tasks.speech import lexicon
from stages.lib.modality.audioviews import spoken_span, stretch, view
from stages.tasks.speech.views import DISAGREE, VIEWS, combine, vote
from tests.test_bench_lexicon_confidence import CHARSET, WORDS, spelled


def centred(values, frames=12, bands=3) -> np.ndarray:
    """A stored clip (bands x frames) whose spoken part is `values` (every band alike), centred
    in silence as the front end centres a clip."""
    clip = np.zeros((bands, frames), np.uint8)
    start = (frames - len(values)) // 2
    clip[:, start:start + len(values)] = values
    return clip


def test_stretch_resamples_the_spoken_part_and_centres_it():
    clip = centred([10, 20, 30, 40])  # frames 4..7
    assert spoken_span(clip) == (4, 7)
    slow = stretch(clip, 0.5)  # twice as long: 8 frames, first and last kept
    assert spoken_span(slow) == (2, 9)
    assert slow[0, 2:10].tolist() == [10, 14, 19, 23, 27, 31, 36, 40]
    fast = stretch(clip, 2.0)  # half as long: 2 frames, its ends
    assert spoken_span(fast) == (5, 6) and fast[0, 5:7].tolist() == [10, 40]
    assert np.array_equal(stretch(clip, 1.0), clip)
    assert (slow[0] == slow[2]).all()  # every band alike, as given


def test_a_slower_view_never_cuts_speech_and_silence_stays_silence():
    full = np.tile(np.arange(1, 13, dtype=np.uint8), (3, 1))  # speech in every frame
    assert np.array_equal(stretch(full, 0.9), full)  # no room: as it is
    long = centred(list(range(1, 11)))  # 10 of 12 frames: 0.9x would need 11
    assert spoken_span(stretch(long, 0.9)) == (0, 10)
    assert spoken_span(stretch(long, 0.5)) == (0, 11)  # at most the clip's frames
    silent = np.zeros((3, 12), np.uint8)
    assert np.array_equal(stretch(silent, 0.9), silent)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stretch_matches_numpys_interpolation_on_random_clips(seed):
    rng = np.random.default_rng(seed)
    clip = np.zeros((8, 60), np.uint8)
    clip[:, 7:50] = rng.integers(1, 256, (8, 43))
    for amount in (0.8, 0.9, 1.1, 1.3):
        got = stretch(clip, amount)
        size = min(60, math.floor(43 / amount + 0.5))
        start = (60 - size) // 2
        assert spoken_span(got) == (start, start + size - 1)
        at = np.linspace(0, 42, size)
        want = np.stack([np.interp(at, np.arange(43), row[7:50].astype(float)) for row in clip])
        # the same line through the same points; rounding may differ by one at a half
        assert np.abs(got[:, start:start + size].astype(int) - np.rint(want)).max() <= 1


def test_views_apply_to_a_batch_in_order():
    rng = np.random.default_rng(5)
    batch = np.zeros((2, 4, 20, 1), np.uint8)
    batch[:, :, 5:15, 0] = rng.integers(1, 256, (2, 4, 10))
    up = view(batch, "band", 1)
    assert np.array_equal(up[:, 1:], batch[:, :-1]) and np.array_equal(up[:, 0], batch[:, -1])
    fast = view(batch, "speed", 1.1)
    assert fast.shape == batch.shape and fast.dtype == np.uint8
    assert np.array_equal(fast[1, ..., 0], stretch(batch[1, ..., 0], 1.1))
    assert [k for k, _ in VIEWS] == ["speed", "speed", "band", "band"]
    with pytest.raises(ValueError, match="unknown view"):
        view(batch, "pitch", 1)


def test_combine_is_the_geometric_mean_and_one_disagreement_sinks_it():
    lp = math.log(0.8)
    assert combine([(True, lp)]) == pytest.approx(0.8)
    assert combine([(True, lp)] + [(True, math.log(0.5))] * 4) == pytest.approx(
        math.exp((lp + 4 * math.log(0.5)) / 5), rel=1e-5)
    sunk = combine([(True, lp)] * 4 + [(False, None)])
    assert sunk == pytest.approx(math.exp((4 * lp + DISAGREE) / 5), rel=1e-5) and sunk < 1e-4


def test_the_vote_takes_the_answer_the_clip_and_its_views_agree_on_best():
    # log P(answer | row) of two answers under three rows
    table = {("a",): [-1.0, -5.0, -5.0], ("b",): [-2.0, -0.5, -0.5]}
    rows = [0, 1, 2]

    def logprob(row, answer):
        return table[answer][row]

    assert vote(rows, [("a",), ("b",), ("b",)], logprob) == ("b",)  # mean -1.0 against -3.67
    table[("b",)] = [-9.0, -4.0, -4.0]
    assert vote(rows, [("a",), ("b",), ("b",)], logprob) == ("a",)  # the clip's is likelier
    assert vote(rows, [("a",)] * 3, lambda r, a: 1 / 0) == ("a",)  # one answer: nothing scored
    table[("b",)] = list(table[("a",)])
    assert vote(rows, [("b",), ("a",), ("a",)], logprob) == ("b",)  # a tie: the clip's own


def test_the_lexicon_decode_reads_the_views_outputs():
    clip = spelled(list("-o-n-e-"), sure=4.0)[None]
    [(text, alone)] = lexicon.decode(clip, CHARSET, WORDS)
    assert text == "one"
    # views that hear the same: the confidence is the clip's own, as the mean of equal terms
    [(same_text, same)] = lexicon.decode(clip, CHARSET, WORDS, views=[clip] * 4)
    assert same_text == "one" and same == pytest.approx(alone, rel=1e-5)
    # one view that hears "two": the answer stays the clip's, its confidence sinks
    other = spelled(list("-t-w-o-"), sure=4.0)[None]
    [(kept, sunk)] = lexicon.decode(clip, CHARSET, WORDS, views=[clip] * 3 + [other])
    assert kept == "one" and sunk < 1e-4 < alone
    # three views that hear "two": they outvote the clip, whose disagreement sinks it alike
    [(voted, low)] = lexicon.decode(clip, CHARSET, WORDS, views=[clip] + [other] * 3)
    assert voted == "two" and low < 1e-4
    # a view less sure of the same text lowers it by the geometric mean
    vague = spelled(list("-o-n-e-"), sure=1.5)[None]
    [(_, lower)] = lexicon.decode(clip, CHARSET, WORDS, views=[vague] * 4)
    [(_, vague_alone)] = lexicon.decode(vague, CHARSET, WORDS)
    assert lower == pytest.approx(alone ** 0.2 * vague_alone ** 0.8, rel=1e-4)


def test_the_keyword_answer_is_the_mean_probability_over_the_views():
    from stages.tasks.audio.views import averaged

    clip = np.log(np.array([[0.6, 0.4, 1e-9]], np.float32))  # "yes", barely
    slower = np.log(np.array([[0.05, 0.9, 0.05]], np.float32))
    faster = np.log(np.array([[0.15, 0.8, 0.05]], np.float32))
    assert averaged(clip, []) is clip
    mean = np.exp(averaged(clip, [slower, faster]))
    assert np.allclose(mean, [[0.8 / 3, 2.1 / 3, 0.1 / 3]], atol=1e-6)
    assert mean.argmax() == 1  # the views outvote the clip
    from stages.tasks.audio import TASK

    meta = {"classes": ["yes", "no", "up"]}
    assert TASK.decode(clip, meta, 1)[0]["label"] == "yes"
    answer = TASK.decode(clip, meta, 1, views=[slower, faster])[0]
    assert answer["label"] == "no" and answer["score"] == pytest.approx(2.1 / 3, abs=1e-5)
    assert len(TASK.views(meta)) == 4
