"""The CTC line confidence predict and serve answer (stages/tasks/common/ctc.py
line_confidence: P(text | line) by the CTC forward sum, text_logprob), the AUROC evaluate
reports of it (auroc, confidence_scores) against a pairwise count written here, and the
uncertain flag (--min-confidence)."""
import itertools
import math
import types

import click
import numpy as np
import pytest

from stages.tasks.common.ctc import auroc, confidence_scores, greedy


def pairwise_auroc(scores, positive):
    """The definition itself: over every (positive, negative) pair, 1 when the positive scores
    higher, 1/2 on a tie, 0 otherwise; the mean."""
    pos = [s for s, p in zip(scores, positive, strict=True) if p]
    neg = [s for s, p in zip(scores, positive, strict=True) if not p]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def test_auroc_by_hand():
    # right lines 0.9, 0.7; wrong 0.8, 0.7: pairs (0.9 > 0.8) 1, (0.9 > 0.7) 1, (0.7 < 0.8) 0,
    # (0.7 = 0.7) 1/2 -> 2.5 / 4
    assert auroc([0.9, 0.8, 0.7, 0.7], [True, False, True, False]) == 0.625
    assert auroc([0.1, 0.2], [False, True]) == 1.0
    assert auroc([0.1, 0.2], [True, False]) == 0.0
    assert auroc([0.5, 0.6], [True, True]) is None and auroc([0.5], [False]) is None


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_auroc_matches_the_pairwise_count_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = 40 + 10 * seed
    scores = np.round(rng.random(n), 1)  # coarse: many ties
    positive = rng.random(n) < 0.6
    assert auroc(scores, positive) == pytest.approx(pairwise_auroc(scores.tolist(),
                                                                   positive.tolist()), abs=1e-12)


def test_confidence_scores_means_and_empty_classes():
    s = confidence_scores([0.9, 0.5, 0.8, 0.2], [True, False, True, False])
    assert s == {"confidence_auroc": 1.0, "confidence_right": 0.85, "confidence_wrong": 0.35}
    assert confidence_scores([0.9, 0.5], [True, True]) == {
        "confidence_auroc": None, "confidence_right": 0.7, "confidence_wrong": None}


def frames(rows):
    """1 x T x 3 logits (blank, a, b) whose softmax per frame is the given probabilities."""
    return np.log(np.array([rows], dtype=np.float64)).astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_text_probability_is_torchs_ctc_likelihood(seed):
    import torch
    import torch.nn.functional as F

    from stages.tasks.common.ctc import log_softmax, text_logprob

    rng = np.random.default_rng(seed)
    for frames_, labels in ((12, [1, 1, 2]), (20, [3, 1, 2, 2, 4]), (5, [2]), (7, [])):
        logp = log_softmax(rng.normal(size=(frames_, 5)) * 2)
        want = -F.ctc_loss(torch.from_numpy(logp)[:, None], torch.tensor([labels or [0]]),
                           torch.tensor([frames_]), torch.tensor([len(labels)]),
                           reduction="sum").item()
        assert text_logprob(logp, labels) == pytest.approx(want, abs=1e-9)
    # more labels (and repeats) than frames can carry: no path
    assert text_logprob(log_softmax(rng.normal(size=(2, 5))), [1, 1]) == -math.inf


def test_the_confidence_is_the_texts_probability_not_one_frames():
    # "ab"; the middle frame hesitates between a blank and "a" again: both paths spell "ab"
    same_text = frames([[0.01, 0.98, 0.01], [0.52, 0.47, 0.01], [0.01, 0.01, 0.98]])
    # a, then a blank barely above "b", then a: "aa", but "aba" came close
    other_text = frames([[0.01, 0.98, 0.01], [0.52, 0.01, 0.47], [0.01, 0.98, 0.01]])
    (t1, c1), = greedy(same_text, ["a", "b"])
    (t2, c2), = greedy(other_text, ["a", "b"])
    # every path spelling "ab": a?b with ? blank, a or b (0.52 + 0.47 + 0.01), -ab and ab-
    assert t1 == "ab" and c1 == pytest.approx(
        0.98 * 1.0 * 0.98 + 0.01 * 0.47 * 0.98 + 0.98 * 0.01 * 0.01, abs=1e-6)
    # "aa" needs the blank between the two a's: only the blank path spells it
    assert t2 == "aa" and c2 == pytest.approx(0.98 * 0.52 * 0.98, abs=1e-5)
    # blank padding (OCR's width buckets: probability 1) changes nothing
    padded = np.concatenate([other_text, frames([[1.0 - 2e-9, 1e-9, 1e-9]] * 4)], axis=1)
    assert greedy(padded, ["a", "b"])[0] == (t2, c2)


def test_the_uncertain_flag_follows_min_confidence():
    from stages.tasks.speech import TASK

    logits = np.concatenate([frames([[0.01, 0.98, 0.01], [0.98, 0.01, 0.01]]),
                             frames([[0.01, 0.6, 0.39], [0.98, 0.01, 0.01]])])
    meta = {"charset": ["a", "b"]}
    plain = TASK.decode(logits, meta, 1)
    assert [p["uncertain"] for p in plain] == [False, False]  # no threshold: never
    flagged = TASK.decode(logits, {**meta, "min_confidence": 0.7}, 1)
    assert [(p["text"], p["uncertain"]) for p in flagged] == [("a", False), ("a", True)]
    # P("a") of the second line: a-, aa, -a = 0.6 * 0.98 + 0.6 * 0.01 + 0.01 * 0.01
    assert flagged[1]["confidence"] == pytest.approx(0.5941, abs=1e-6)
    assert TASK.decode(logits, {**meta, "min_confidence": 0.594}, 1)[1]["uncertain"] is False
    assert set(TASK.prediction_fields) == set(plain[0]) == set(TASK.empty_prediction())


def test_min_confidence_is_refused_for_a_task_without_line_confidence():
    from stages.tasks import get
    from tools.options import apply_decode_options

    model = types.SimpleNamespace(task=get("classification"), meta={})
    with pytest.raises(click.UsageError, match="--min-confidence: the model's task "
                                               r"\(classification\) has no line confidence"):
        apply_decode_options(model, min_confidence=0.5)
    ocr = types.SimpleNamespace(task=get("ocr"), meta={})
    apply_decode_options(ocr, min_confidence=0.5)
    assert ocr.meta == {"min_confidence": 0.5}


def test_the_report_states_the_confidence_figures_when_evaluate_measured_them():
    from types import SimpleNamespace

    from stages.lib.io import csv_bytes, json_bytes
    from stages.report.tasks.ocr import evaluation

    files = {"per_class.json": json_bytes({"lower": 1.0}),
             "cer_distribution.csv": csv_bytes([], ["bin", "lines"]),
             "bad_cases.csv": csv_bytes([], ["path", "truth", "predicted", "cer", "confidence"]),
             "confusions.csv": csv_bytes([], ["truth", "predicted", "count"])}
    measured = {"cer": 0.05, "lines": 6, "confidence_auroc": 0.9375,
                "confidence_right": 0.91, "confidence_wrong": 0.42}
    html = evaluation(SimpleNamespace(eval=measured, eval_files=files))
    assert ("ranks a right one above a wrong one with probability 0.938 (AUROC of "
            "correctness); its mean is 0.910 on right lines, 0.420 on wrong ones") in html
    assert 'data-key="eval.confidence_auroc" data-value="0.9375"' in html
    views = {**measured, "confidence_views": 4}  # speech with a lexicon
    assert ("answer (from the clip and 4 test-time views of it) ranks a right one above" in
            evaluation(SimpleNamespace(eval=views, eval_files=files)))
    assert "test-time views" not in html
    every_right = {**measured, "confidence_auroc": None, "confidence_wrong": None}
    assert "AUROC" not in evaluation(SimpleNamespace(eval=every_right, eval_files=files))
