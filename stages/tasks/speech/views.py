"""Test-time views: the confidence a lexicon-decoded speech model answers. Besides the clip, the
model reads four nudged copies of its stored log-mel (VIEWS): its spoken part played 0.9x and
1.1x as fast, and its mel bands moved one up and one down. A clip the model truly hears gives the
same text under every nudge; a voice it has not learned tends to fall apart under one of them.

The confidence is the geometric mean over the clip and its views of P(text | view), the exact
CTC probability of the clip's answer (ctc.text_logprob), a view whose own lexicon answer differs
counting as exp(DISAGREE): one disagreeing view takes the confidence to about 0. On the speech
sample's Flite clips (a synthesizer nothing trains on) it ranks right clips above wrong ones at
an AUROC of about 0.9, where P(text | clip) alone gives 0.85 (docs/benchmarks.md). It costs four
more model runs and lexicon searches a clip.

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


def combine(logprob: float, others) -> float:
    """The confidence of a clip's answer from log P(text | clip) and, per view, (whether the
    view's own answer is the same text, log P(text | view)): exp of their mean, DISAGREE
    standing for a view that answers otherwise; to 6 significant digits, as every line
    confidence."""
    scores = [logprob] + [lp if same else DISAGREE for same, lp in others]
    return float(f"{math.exp(sum(scores) / len(scores)):.6g}")
