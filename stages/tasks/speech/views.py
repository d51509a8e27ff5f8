"""Test-time views: the text and the confidence a lexicon-decoded speech model answers. Besides
the clip, the model reads four nudged copies of its stored log-mel (VIEWS): its spoken part
played 0.9x and 1.1x as fast, and its mel bands moved one up and one down. A clip the model truly
hears gives the same text under every nudge; a voice it has not learned tends to fall apart
under one of them.

The text is the one the clip and its views agree on best (vote): of their own lexicon answers,
the one of the highest mean log P(text | view). The confidence is the geometric mean over the
clip and its views of P(text | view), the exact CTC probability of that text
(ctc.text_logprob), one whose own answer differs counting as exp(DISAGREE): one disagreeing view
takes the confidence to about 0. On the speech sample's Flite clips (a synthesizer nothing
trains on) the vote reads at a lower CER than the clip alone, and the confidence ranks right
clips above wrong ones at an AUROC near 0.9, where P(text | clip) alone gives 0.85
(docs/benchmarks.md). It costs four more model runs and lexicon searches a clip.

Evaluate (torch, on the stored test shards) and predict and serve (any backend, on a clip read
by the same front end) make the views of the same stored uint8 log-mel
(stages/lib/modality/audioviews.py), so the confidence predict answers is the one evaluate
scores.
"""
import math

from stages.lib.modality import audioviews

VIEWS = (("speed", 0.9), ("speed", 1.1), ("band", 1), ("band", -1))
DISAGREE = -50.0  # the log-probability a view counts with when its own answer differs


def transforms() -> list:
    """The views as functions of a stored batch, in VIEWS' order."""
    return audioviews.transforms(VIEWS)


def vote(rows, answers, logprob) -> tuple:
    """The answer (labels) the clip and its views agree on best: of the distinct answers of the
    clip and each view (answers, one per row of log-probabilities in rows), the one of the
    highest mean log P(answer | row) over every row (logprob: ctc.text_logprob); the clip's own
    when it is the only one, and on a tie."""
    candidates = sorted(set(answers))
    if len(candidates) == 1:
        return answers[0]
    scored = {c: sum(logprob(r, c) for r in rows) / len(rows) for c in candidates}
    return max(candidates, key=lambda c: (scored[c], c == answers[0]))


def combine(terms) -> float:
    """The confidence of an answer from (whether its own answer is the same text, log P(text |
    it)) of the clip and each of its views: exp of their mean, DISAGREE standing for one that
    answers otherwise; to 6 significant digits, as every line confidence."""
    scores = [lp if same else DISAGREE for same, lp in terms]
    return float(f"{math.exp(sum(scores) / len(scores)):.6g}")
