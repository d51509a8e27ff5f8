"""bench/lexicon_confidence.py: each candidate confidence of a lexicon-decoded clip, on logits
whose answer is known, and the whole bench on the suite's tiny speech run with Flite's clips."""
import shutil
import subprocess
import sys

import numpy as np

from bench.lexicon_confidence import DISAGREE, candidates, view_scores
from tests.conftest import ROOT, missing_tool

CHARSET = [" ", "e", "i", "n", "o", "s", "t", "w", "x"]
WORDS = ["one", "six", "two"]


def spelled(frames: list[str], sure: float = 12.0) -> np.ndarray:
    """T x C logits whose best class per frame is the given character ("-": the blank)."""
    logits = np.zeros((len(frames), len(CHARSET) + 1))
    for t, ch in enumerate(frames):
        logits[t, 0 if ch == "-" else CHARSET.index(ch) + 1] = sure
    return logits


def test_a_clear_clip_scores_high_and_a_word_outside_the_lexicon_lowers_agreement():
    clear, scores = candidates(spelled(list("-o-n-e- -t-w-o-")), CHARSET, WORDS)
    assert clear == "one two"
    assert scores["text_prob"] > -0.01 and scores["greedy_agrees"] > 0.99
    assert scores["min_nonblank"] > 0.99 and scores["vs_free_beam"] > -0.01
    # greedy hears "seix"; the lexicon answers a word it holds, and agreement is lost
    heard, doubt = candidates(spelled(list("-s-e-i-x-"), sure=3.0), CHARSET, WORDS)
    assert heard in WORDS and heard != "seix"
    assert doubt["greedy_agrees"] < 0.5 < scores["greedy_agrees"]
    assert doubt["text_prob"] < scores["text_prob"] and doubt["vs_free_beam"] < 0
    assert doubt["per_word"] == doubt["text_prob"]  # one word


def test_the_bench_prints_each_candidates_auroc_on_both_sets(speech_project):
    if not shutil.which("flite"):
        missing_tool("Flite", "apt-get install -y flite")
    proc = subprocess.run([sys.executable, "-m", "bench.lexicon_confidence", "--run",
                           str(speech_project), "--clips", "4"], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("the run's test split (") and "flite voices (" in proc.stdout
    assert sum("text_prob      auroc" in ln for ln in lines) == 2
    assert sum(ln.startswith("  ") for ln in lines) == 18  # 9 candidates x 2 sets
    assert sum("views_agree    auroc" in ln for ln in lines) == 2


def test_view_scores_count_agreeing_views_and_floor_the_others():
    lp = np.log(0.5)
    same = view_scores("one", lp, [("one", lp)] * 4)
    assert same["views_agree"] == (4 + 0.5) / 5 and abs(same["views_geo"] - lp) < 1e-12
    split = view_scores("one", lp, [("one", lp), ("two", -1.0), ("one", lp), ("six", -2.0)])
    assert split["views_agree"] == (2 + 0.5) / 5 < same["views_agree"]
    assert split["views_geo"] == (3 * lp + 2 * DISAGREE) / 5
