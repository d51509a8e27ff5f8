"""Decoding within the train split's words (stages/tasks/speech/lexicon.py): the search finds
the most probable lexicon text (checked against every such text scored by the exact CTC forward
sum), it answers a lexicon word where greedy spells a non-word, its confidence is the exact
P(text | clip), an open vocabulary decodes as before, and a model exported before the lexicon
existed still loads."""
import itertools
import json
import math

import numpy as np
import pytest

from stages.tasks.common.ctc import greedy, log_softmax, text_logprob
from stages.tasks.speech import TASK, lexicon
from stages.tasks.speech.metrics import evaluate

CHARSET = [" ", "e", "i", "n", "o", "s", "v", "x"]
WORDS = ["one", "six", "seven", "nine", "seen"]  # seen: a repeat needs a blank between


def logits_of(path, high=6.0, seed=0):
    """T x C logits: noise, with `high` added on each frame's class of path."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (len(path), len(CHARSET) + 1)).astype(np.float32)
    for t, c in enumerate(path):
        x[t, c] += high
    return x


def codes(text):
    return [CHARSET.index(c) + 1 for c in text]


def test_words_of_lists_a_closed_vocabulary_and_leaves_an_open_one_out():
    rows = [{"text": "six one"}, {"text": "one  nine"}, {"text": "six"}]
    assert lexicon.words_of(rows) == ["nine", "one", "six"]
    many = [{"text": f"w{i}"} for i in range(lexicon.MAX_WORDS + 1)]
    assert lexicon.words_of(many) == [] and len(lexicon.words_of(many[:-1])) == lexicon.MAX_WORDS


@pytest.mark.parametrize("seed", [0, 1, 2, 3, "seen"])
def test_the_search_finds_the_most_probable_lexicon_text(seed):
    """Every text of one or two lexicon words scored by the forward sum: a wide search answers
    the best of them, whatever the noise. "seen": frames s e e n, where "seen" would need a
    blank between its two e's (5 frames): CTC cannot say it, so neither may the search."""
    if seed == "seen":
        logp = log_softmax(logits_of(codes("seen"), high=8))
    else:
        logp = log_softmax(np.random.default_rng(seed).normal(0, 2, (14, len(CHARSET) + 1)))
    texts = list(WORDS) + [" ".join(p) for p in itertools.product(WORDS, repeat=2)]
    scored = {t: text_logprob(logp, codes(t)) for t in texts}
    best = max(scored.values())
    root = lexicon.trie(WORDS, CHARSET)
    labels, _ = lexicon.search(logp, 2000, root, CHARSET.index(" ") + 1)
    found = "".join(CHARSET[i - 1] for i in labels)
    assert found in scored and scored[found] == pytest.approx(best, abs=1e-9), (found, scored)


def test_a_non_word_by_greedy_is_the_lexicon_word_the_frames_favour():
    s, e, i, x = (CHARSET.index(c) + 1 for c in "seix")
    logits = logits_of([s, 0, e, e, 0, i, 0, x, 0])  # greedy: "seix"
    logits[[2, 3], 0] += 5.5  # the e frames nearly blank too
    [(free, _)] = greedy(logits[None], CHARSET)
    assert free == "seix"
    [(text, confidence)] = lexicon.decode(logits[None], CHARSET, WORDS)
    assert text == "six"
    logp = log_softmax(logits)
    assert confidence == pytest.approx(math.exp(text_logprob(logp, codes("six"))), rel=1e-5)
    # a confident greedy lexicon text is answered as it is, with greedy's own confidence
    clean = logits_of([s, 0, i, 0, x, 0, CHARSET.index(" ") + 1] + codes("one") + [0], high=12)
    [(text, confidence)] = lexicon.decode(clean[None], CHARSET, WORDS)
    [(free, own)] = greedy(clean[None], CHARSET)
    assert text == free == "six one" and confidence == pytest.approx(own, rel=1e-5)


def test_a_clip_cut_inside_a_word_is_answered_with_its_whole_words():
    """Frames that end inside a word ("six se", no frames left for "ven"): with every kept
    prefix unfinished, the answer is cut back to the last whole word, never a fragment."""
    space = CHARSET.index(" ") + 1
    logp = log_softmax(logits_of(codes("six") + [space] + codes("se"), high=9))
    root = lexicon.trie(WORDS, CHARSET)
    for width in (1, 2, 8):
        labels, logprob = lexicon.search(logp, width, root, space)
        assert "".join(CHARSET[i - 1] for i in labels) == "six", width
        assert logprob == pytest.approx(text_logprob(logp, codes("six")))
    assert lexicon.whole_words(tuple(codes("six se")), space) == tuple(codes("six"))
    assert lexicon.whole_words(tuple(codes("se")), space) == ()


def test_the_task_decodes_in_the_lexicon_and_freely_without_one():
    s, i, x = (CHARSET.index(c) + 1 for c in "six")
    logits = logits_of([s, 0, i, i, 0, x, 0, i])[None]  # greedy: "sixi"
    meta = {"charset": CHARSET, "lexicon": WORDS}
    [row] = TASK.decode(logits, meta, 1)
    assert row["text"] == "six" and 0 < row["confidence"] <= 1 and row["uncertain"] is False
    [free] = TASK.decode(logits, {"charset": CHARSET, "lexicon": []}, 1)
    assert free["text"] == "sixi" == TASK.decode(logits, {"charset": CHARSET}, 1)[0]["text"]
    [sure] = TASK.decode(logits, {**meta, "min_confidence": 1.0}, 1)
    assert sure["uncertain"] is True and sure["text"] == "six"


def test_evaluate_scores_the_lexicon_decoding_and_keeps_greedy_beside_it(tmp_path,
                                                                         monkeypatch):
    from types import SimpleNamespace

    from stages.lib.io import write_csv

    monkeypatch.chdir(tmp_path)
    write_csv(tmp_path / "data/split/test.csv", [{"path": "a.wav", "text": "six"}],
              ["path", "text"])
    s, i, x = (CHARSET.index(c) + 1 for c in "six")
    logits = logits_of([s, 0, i, i, 0, x, 0, i])[None]
    meta = {"charset": CHARSET, "lexicon": WORDS}
    metrics, files, line = evaluate(logits, ["a.wav"], None, meta, SimpleNamespace(bad_cases=0))
    assert metrics["cer"] == 0 and metrics["cer_greedy"] == pytest.approx(1 / 3)
    assert metrics["lexicon_words"] == 5 and metrics["clip_accuracy"] == 1
    assert "within the lexicon's 5 words" in line
    assert "a.wav,six,six," in files["predictions.csv"].decode()


def test_a_model_exported_before_the_lexicon_still_loads():
    """The lexicon is an optional meta key: an exported speech model without it decodes
    freely; a missing required key is still refused, named."""
    from stages.lib.io import StageError
    from tools.inference import RECIPE, task_and_meta

    props = {"task": json.dumps("speech"), "charset": json.dumps(CHARSET),
             "blank": "0", "max_len": "12", **{k: json.dumps(0) for k in RECIPE}}
    task, _, meta = task_and_meta(props, "old.onnx")
    assert task.name == "speech" and "lexicon" not in meta and meta["charset"] == CHARSET
    with pytest.raises(StageError, match="lacks charset"):
        task_and_meta({k: v for k, v in props.items() if k != "charset"}, "old.onnx")
