"""Which confidence of a lexicon-decoded speech model ranks right clips above wrong ones on a
synthesizer it never heard: the AUROC of clip correctness of each candidate, on the run's test
split and on another synthesizer's clips (bench/speech_peer.py's: CMU Flite by default).

    python -m bench.lexicon_confidence --run /tmp/speech-run [--clips 120] [--other flite]

The run: a finished `task: speech` `dvc repro` whose model has a lexicon (its models/model.onnx
through onnxruntime, as predict reads a clip). Each clip is decoded within the lexicon (the
text predict answers); the candidates, from its log-probabilities log p[t, c]:
`text_prob`, P(text | clip), what predict and serve answer; `greedy_agrees`, the same with the
clips whose greedy text is the lexicon's first; `per_word`, log P(text | clip) per word;
`vs_free_beam`, log P(text | clip) less the log-probability of the free beam's best text;
`min_nonblank` and `mean_nonblank`, the least and the mean top posterior of the frames whose
best class is not the blank; `entropy`, minus the frames' mean entropy. Two more run the model
on the test-time VIEWS of the clip besides itself (stages/tasks/speech/views.py: its spoken part
played 0.9x and 1.1x as fast, its mel bands moved one up and one down; 5 model runs and lexicon
searches a clip):
`views_agree`, (the views whose own answer is the clip's text + P(text | clip)) / 5;
`views_geo`, the mean over the clip and its views of log P(text | view), a view whose own
answer differs counting as DISAGREE: the log of the confidence evaluate, predict and serve
answer.
"""
import tempfile
from pathlib import Path

import click
import numpy as np

from bench import speech_peer
from stages.lib.modality.audioviews import view
from stages.tasks.speech.views import DISAGREE, VIEWS

WIDTH = 8  # the lexicon and free beams' width (predict's default)


def view_scores(text: str, logprob: float, others) -> dict:
    """views_agree and views_geo of a clip's text and log P(text | clip), from each view's
    (own answer, log P(text | view))."""
    agree = sum(answer == text for answer, _ in others)
    geo = [logprob] + [lp if answer == text else DISAGREE for answer, lp in others]
    return {"views_agree": (agree + float(np.exp(logprob))) / (len(others) + 1),
            "views_geo": float(np.mean(geo))}


def candidates(logits: np.ndarray, charset, words) -> tuple[str, dict]:
    """(the lexicon's text, {candidate: score}) of one clip's T x C logits."""
    from stages.tasks.common import ctc
    from stages.tasks.speech import lexicon

    lp = ctc.log_softmax(np.asarray(logits, dtype=np.float64)[None])[0]
    space = charset.index(" ") + 1 if " " in charset else None
    labels, _ = lexicon.search(lp, WIDTH, lexicon.trie(words, charset), space)
    text = "".join(charset[i - 1] for i in labels)
    logprob = ctc.text_logprob(lp, labels)
    _, free = ctc.prefix_search(lp, WIDTH)
    greedy = ctc.greedy(np.asarray(logits)[None], charset)[0][0]
    post = np.exp(lp)
    spoken = post.argmax(1) != 0
    top = post.max(1)
    return text, {
        "text_prob": logprob,
        "greedy_agrees": float(greedy == text) + 1e-3 * logprob,  # agreement first, then P
        "per_word": logprob / max(1, len(text.split())),
        "vs_free_beam": logprob - free,
        "min_nonblank": float(top[spoken].min()) if spoken.any() else 1.0,
        "mean_nonblank": float(top[spoken].mean()) if spoken.any() else 1.0,
        "entropy": float((post * lp).sum(1).mean()),
    }


def scored(model, items, charset, words) -> tuple[list[bool], dict]:
    """(right per clip, {candidate: [score per clip]})."""
    from stages.tasks.common import ctc

    right, out = [], {}
    for path, truth in items:
        x = np.asarray(model.modality.read(path, model.spec))
        logits = model.logits(np.stack([x, *(view(x[None], k, a)[0] for k, a in VIEWS)]))
        text, scores = candidates(logits[0], charset, words)
        labels = [charset.index(c) + 1 for c in text]
        others = [(candidates(v, charset, words)[0],
                   ctc.text_logprob(ctc.log_softmax(np.asarray(v, np.float64)[None])[0], labels))
                  for v in logits[1:]]
        scores.update(view_scores(text, scores["text_prob"], others))
        right.append(text == truth)
        for name, value in scores.items():
            out.setdefault(name, []).append(value)
    return right, out


@click.command()
@speech_peer.run_options("task speech (its model.onnx, with a lexicon, test split and "
                         "data.source)", 120)
def main(run_dir, clips, seed, other):
    """Print each candidate confidence's AUROC of clip correctness on the run's test split
    and on another synthesizer's clips."""
    from stages.tasks.common.ctc import auroc
    from tools.inference import load

    run = run_dir.resolve()
    model = load("onnxruntime", run / "models/model.onnx", threads=1)
    charset = list(model.meta["charset"])
    words = list(model.meta.get("lexicon") or [])
    if not words:
        raise click.UsageError(f"{run}/models/model.onnx has no lexicon; give a speech run of "
                               f"a closed vocabulary (the built-in sample's)")
    with tempfile.TemporaryDirectory(prefix="lexicon-confidence-") as tmp:
        sets = {"the run's test split": speech_peer.held_out_espeak(run, "speech"),
                f"{other} voices": speech_peer.other_clips("speech", clips, seed,
                                                           Path(tmp) / other, other)}
        for name, items in sets.items():
            right, scores = scored(model, items, charset, words)
            click.echo(f"{name} ({sum(right)} of {len(right)} right)")
            for candidate, values in scores.items():
                ranked = auroc(values, right)
                shown = "n/a" if ranked is None else f"{ranked:.3f}"
                click.echo(f"  {candidate:14s} auroc {shown}")


if __name__ == "__main__":
    main()
