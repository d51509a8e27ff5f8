"""Decoding within the words of the train split (a closed vocabulary: commands, digits): CTC
prefix beam search whose every prefix spells lexicon words separated by single spaces, as a
recognizer with a word grammar does (PocketSphinx's JSGF, a WFST decoder's lexicon). A model
that hears "seix" answers the lexicon's "six" when the frames say so more than anything else
the lexicon allows.

The lexicon is prepare's (meta.json `lexicon`, carried by model.pt and the exported models'
metadata): the train split's distinct words, sorted, when there are at most MAX_WORDS of them;
an empty list (an open vocabulary: LibriSpeech, Common Voice) decodes freely, as before.

The search is ctc.prefix_beams with the growths a prefix may take restricted to the trie's:
the next letter of a lexicon word, a space after a whole word. A line's text must end on a whole
word (or be empty); when every prefix the beam kept ends inside a word (an untrained model, a
clip cut short), each is cut back to its last whole word and the cut texts are scored exactly:
the answer always spells lexicon words. Its confidence is P(text | line), the exact CTC forward
sum of its paths (ctc.text_logprob), to 6 significant digits: the same probability greedy's
confidence is of its own text.
"""
import math

import numpy as np

MAX_WORDS = 1000  # more distinct train words: an open vocabulary, no lexicon
WIDTH = 8  # the search's width unless predict/serve --beam gives one
END = "$"  # a trie node's mark: a word ends here


def words_of(rows) -> list[str]:
    """The lexicon of transcripts: their distinct words (split on spaces), sorted, or [] when
    there are more than MAX_WORDS."""
    words = sorted({w for r in rows for w in r["text"].split()})
    return words if len(words) <= MAX_WORDS else []


def trie(words, charset) -> dict:
    """{label: node} over the charset's labels (1-based, 0 is the blank); END in a node that
    ends a word. A word with a character outside the charset is left out (it cannot be
    emitted)."""
    index = {c: i + 1 for i, c in enumerate(charset)}
    root: dict = {}
    for word in words:
        if not all(c in index for c in word):
            continue
        node = root
        for c in word:
            node = node.setdefault(index[c], {})
        node[END] = True
    return root


def search(logp: np.ndarray, width: int, root: dict, space: int | None):
    """(labels, log-probability the beam summed) of the most probable text spelled by lexicon
    words over one line's T x C log-probabilities; see the module docstring."""
    from stages.tasks.common.ctc import best, prefix_beams, text_logprob

    nodes = {(): root}  # each kept prefix's trie node (root after a space)

    def growths(prefix, _ext, _beams):
        node = nodes[prefix]
        out = [c for c in node if c != END]
        if END in node and space is not None:
            out.append(space)
        for c in out:
            nodes.setdefault((*prefix, c), root if c == space else node[c])
        return out

    beams = prefix_beams(logp, width, growths)
    whole = {p: v for p, v in beams.items() if not p or END in nodes[p]}
    if whole:
        return best(whole)
    # every kept prefix ends inside a word: each cut back to its last whole word, scored exactly
    cut = {whole_words(p, space) for p in beams}
    scored = {c: text_logprob(logp, c) for c in cut}
    return min(scored.items(), key=lambda kv: (-kv[1], kv[0]))


def whole_words(prefix: tuple, space) -> tuple:
    """prefix without its last, unfinished word (and the space before it)."""
    k = len(prefix)
    while k > 0 and prefix[k - 1] != space:
        k -= 1
    return prefix[:max(k - 1, 0)]


def decode(logits: np.ndarray, charset, words, width: int = WIDTH,
           views=()) -> list[tuple[str, float]]:
    """(text, confidence) per line of N x T x C logits, each text spelled by the lexicon: the
    search's best and P(text | line). With views (the N x T x C logits of each test-time view
    of the same lines: views.py), the text the line and its views agree on best (views.vote)
    and their combined confidence (views.combine)."""
    from stages.tasks.common.ctc import log_softmax, text_logprob
    from stages.tasks.speech.views import combine, vote

    root = trie(words, charset)
    space = charset.index(" ") + 1 if " " in charset else None
    seen = [log_softmax(np.asarray(v)) for v in views]
    out = []
    for n, line in enumerate(log_softmax(np.asarray(logits))):
        labels = tuple(search(line, width, root, space)[0])
        if seen:
            rows = [line, *(v[n] for v in seen)]
            answers = [labels, *(tuple(search(r, width, root, space)[0]) for r in rows[1:])]
            labels = vote(rows, answers, text_logprob)
            confidence = combine([(a == labels, text_logprob(r, labels) if a == labels else None)
                                  for r, a in zip(rows, answers, strict=True)])
        else:
            confidence = float(f"{math.exp(text_logprob(line, labels)):.6g}")
        out.append(("".join(charset[i - 1] for i in labels), confidence))
    return out
