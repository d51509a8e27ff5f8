"""CTC prefix beam search (predict/serve --beam, issue 20) without a pipeline run: width 1 is
greedy, a hand-built matrix where greedy and beam differ, and brute-force enumeration of every
path on tiny T and alphabets."""
import itertools
import math

import numpy as np
import pytest

from stages.tasks.common.ctc import beam, collapse, greedy, log_softmax, prefix_search


def brute_force(probs: np.ndarray) -> dict:
    """{labelling: P(labelling)} summed over every one of the C ** T paths."""
    totals = {}
    for path in itertools.product(range(probs.shape[1]), repeat=probs.shape[0]):
        p = math.prod(probs[t, c] for t, c in enumerate(path))
        key = tuple(collapse(path))
        totals[key] = totals.get(key, 0.0) + p
    return totals


def test_hand_built_matrix_where_greedy_and_beam_differ():
    # two frames, each blank 0.6 and "a" 0.4: the best path is blank blank (""), P = 0.36, but
    # "a" has three paths (a-, -a, aa): 0.24 + 0.24 + 0.16 = 0.64
    probs = np.array([[0.6, 0.4], [0.6, 0.4]])
    logits = np.log(probs)[None]
    assert greedy(logits, ["a"])[0][0] == ""
    text, confidence = beam(logits, ["a"], 2)[0]
    assert text == "a" and confidence == pytest.approx(0.64, abs=1e-6)
    # a repeat needs a blank between: "aa" is only a-a, P = 0.4 * 0.6 * 0.4
    probs3 = np.array([[0.1, 0.9], [0.8, 0.2], [0.1, 0.9]])
    assert brute_force(probs3)[(1, 1)] == pytest.approx(0.9 * 0.8 * 0.9)
    assert beam(np.log(probs3)[None], ["a"], 3)[0] == ("aa", 0.648)
    # greedy "ab" by frames, but "b" alone collects more paths
    probs_b = np.array([[0.35, 0.4, 0.25], [0.3, 0.0, 0.7]]) + 1e-12
    totals = brute_force(probs_b)
    assert greedy(np.log(probs_b)[None], ["a", "b"])[0][0] == "ab"
    assert max(totals, key=totals.get) == (2,)
    assert beam(np.log(probs_b)[None], ["a", "b"], 4)[0][0] == "b"


@pytest.mark.parametrize("seed", range(12))
def test_wide_beam_finds_the_brute_force_most_probable_labelling(seed):
    rng = np.random.default_rng(seed)
    frames, classes = int(rng.integers(2, 6)), int(rng.integers(2, 4))
    logits = rng.normal(scale=2.0, size=(frames, classes))
    probs = np.exp(log_softmax(logits))
    totals = brute_force(probs)
    best = max(totals, key=totals.get)
    codes, logprob = prefix_search(log_softmax(logits), width=len(totals))
    assert codes == best and math.exp(logprob) == pytest.approx(totals[best], rel=1e-9)
    # any width: the result is a real labelling and its probability never exceeds the truth
    for width in (2, 3):
        codes, logprob = prefix_search(log_softmax(logits), width)
        assert math.exp(logprob) <= totals[codes] * (1 + 1e-9)


def textbook_prefix_search(probs: np.ndarray, width: int):
    """The textbook prefix beam search in probabilities, every growth of every prefix scored."""
    beams = {(): (1.0, 0.0)}
    for frame in probs:
        grown = {}
        for prefix, (pb, pnb) in beams.items():
            b, nb = grown.get(prefix, (0.0, 0.0))
            grown[prefix] = (b + (pb + pnb) * frame[0],
                             nb + (pnb * frame[prefix[-1]] if prefix else 0.0))
            for c in range(1, len(frame)):
                q = (*prefix, c)
                b, nb = grown.get(q, (0.0, 0.0))
                add = (pb if prefix and prefix[-1] == c else pb + pnb) * frame[c]
                grown[q] = (b, nb + add)
        beams = dict(sorted(grown.items(), key=lambda kv: (-sum(kv[1]), kv[0]))[:width])
    return min(beams.items(), key=lambda kv: (-sum(kv[1]), kv[0]))


def test_scoring_only_the_best_growths_matches_the_textbook_search():
    """prefix_search scores only the `width` best growths of each prefix (plus growths that
    are kept prefixes); the textbook search scores all: same text, same probability."""
    rng = np.random.default_rng(7)
    for _ in range(25):
        logits = rng.normal(scale=3.0, size=(10, 12))
        for width in (2, 3, 5):
            codes, logprob = prefix_search(log_softmax(logits), width)
            ref, (pb, pnb) = textbook_prefix_search(np.exp(log_softmax(logits)), width)
            assert codes == ref and math.exp(logprob) == pytest.approx(pb + pnb, rel=1e-9)


def test_width_one_is_greedy_and_wider_beams_on_peaked_lines_agree_with_it():
    rng = np.random.default_rng(3)
    charset = ["a", "b", "c", "中"]
    paths = rng.integers(0, 5, size=(30, 24))
    logits = rng.normal(scale=0.5, size=(30, 24, 5)).astype(np.float32)
    logits[np.arange(30)[:, None], np.arange(24)[None], paths] += 9.0  # a sure model
    assert beam(logits, charset, 1) == greedy(logits, charset)
    assert [t for t, _ in beam(logits, charset, 5)] == [t for t, _ in greedy(logits, charset)]
    with pytest.raises(ValueError, match="beam width must be >= 1"):
        beam(logits, charset, 0)
