"""Speech evaluation on the fixed test split: CER (the headline) and WER with jiwer, by the
decoding predict and serve answer with by default (within the lexicon when prepare wrote one:
lexicon.py, at its width; else greedy), the same by greedy decoding when there is a lexicon
(cer_greedy, wer_greedy: the frames alone) and by free CTC prefix beam search of width BEAM
(cer_beam, wer_beam), clip accuracy, how well the answered confidence tells right clips from
wrong ones (confidence_auroc, confidence_right, confidence_wrong: ctc.confidence_scores; with
a lexicon, the confidence of the test-time views, views.py, as predict answers it), CER
by clip duration and by transcript length, CER per speaker (the manifest's group), and the
worst clips.

The truth is the transcript in data/split/test.csv (not the encoded target, which drops
characters the training split never had: those count as errors here).
"""
from pathlib import Path

from stages.tasks.common.ctc import (beam, cer_by_length, confidence_scores, distance, greedy,
                                     scores)
from stages.lib.io import csv_bytes, read_csv

TEST_SPLIT = Path("data/split/test.csv")
MANIFEST = Path("data/manifest.csv")
BEAM = 8  # the prefix beam search's width evaluate reports (predict/serve: --beam K)
BIN_SECONDS = 0.5  # CER by clip duration: bins this wide
FIELDS = ["path", "truth", "predicted", "cer", "confidence", "seconds", "speaker"]


def speech_scores(truths: list[str], preds: list[str]) -> dict:
    """scores() (stages/tasks/common/ctc.py) in a clip's words: clip_accuracy, clips."""
    s = scores(truths, preds)
    s["clip_accuracy"], s["clips"] = s.pop("line_accuracy"), s.pop("lines")
    return s


def cer_by_duration(seconds, line_cer) -> list[dict]:
    """Mean CER per BIN_SECONDS bin of clip duration (its start, in seconds), shortest first."""
    by_bin = {}
    for s, c in zip(seconds, line_cer, strict=True):
        by_bin.setdefault(int(s // BIN_SECONDS), []).append(c)
    return [{"seconds": f"{b * BIN_SECONDS:.1f}", "cer": f"{sum(cs) / len(cs):.6f}",
             "clips": len(cs)} for b, cs in sorted(by_bin.items())]


def per_speaker(rows: list) -> list[dict]:
    by = {}
    for r in rows:
        by.setdefault(r["speaker"], []).append(r)
    out = []
    for name, members in sorted(by.items()):
        s = speech_scores([r["truth"] for r in members], [r["predicted"] for r in members])
        out.append({"speaker": name, "clips": s["clips"], "cer": f"{s['cer']:.6f}",
                    "wer": f"{s['wer']:.6f}"})
    return out


def bad_cases_png(samples, titles, thumbnail) -> bytes:
    """The worst clips' spectrograms (the modality's thumbnail), truth and prediction above."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from stages.lib.charts import png_bytes

    fig, axes = plt.subplots(len(samples), 1, figsize=(7, 1.6 * len(samples)), squeeze=False)
    for ax, sample, title in zip(axes[:, 0], samples, titles, strict=True):
        thumbnail(ax, sample)
        ax.set_title(title, fontsize=7, loc="left")
    fig.tight_layout()
    return png_bytes(fig)


def evaluate(outputs, paths, inputs, meta, p, thumbnail=None, views=()):
    """(metrics, {file name: bytes} for plots/eval/, one summary line). views: the outputs of
    each test-time view of the test clips (views.py), which the lexicon's confidence reads, as
    predict's does; confidence_views says how many there were."""
    truth_of = {r["path"]: r["text"] for r in read_csv(TEST_SPLIT)}
    facts = {r["path"]: r for r in read_csv(MANIFEST)} if MANIFEST.exists() else {}
    truths = [truth_of[s] for s in paths]
    seconds = [float(facts.get(s, {}).get("duration") or 0) for s in paths]
    decoded = greedy(outputs, meta["charset"])
    words = meta.get("lexicon") or []
    metrics = {}
    if words:
        from stages.tasks.speech.lexicon import decode

        free = speech_scores(truths, [t for t, _ in decoded])
        metrics = {"cer_greedy": free["cer"], "wer_greedy": free["wer"],
                   "lexicon_words": len(words)}
        decoded = decode(outputs, meta["charset"], words, views=views)
        metrics["confidence_views"] = len(views)
    preds = [t for t, _ in decoded]
    metrics.update(speech_scores(truths, preds))
    beamed = [t for t, _ in beam(outputs, meta["charset"], BEAM)]
    by_beam = speech_scores(truths, beamed)
    metrics.update({"cer_beam": by_beam["cer"], "wer_beam": by_beam["wer"], "beam_width": BEAM})
    metrics.update(confidence_scores([c for _, c in decoded],
                                     [t == q for t, q in zip(truths, preds, strict=True)]))
    line_cer = [distance(t, q) / max(len(t), 1) for t, q in zip(truths, preds, strict=True)]
    rows = [{"path": s, "truth": t, "predicted": q, "cer": f"{c:.4f}", "confidence": f"{f:.6g}",
             "seconds": f"{d:.3f}", "speaker": facts.get(s, {}).get("group") or ""}
            for s, t, q, c, (_, f), d in zip(paths, truths, preds, line_cer, decoded, seconds,
                                             strict=True)]
    order = sorted(range(len(rows)), key=lambda i: (-line_cer[i], decoded[i][1], paths[i]))
    bad = [rows[i] for i in order if line_cer[i] > 0]
    files = {"predictions.csv": csv_bytes(rows, FIELDS),
             "bad_cases.csv": csv_bytes(bad, FIELDS),
             "cer_by_duration.csv": csv_bytes(cer_by_duration(seconds, line_cer),
                                              ["seconds", "cer", "clips"]),
             "cer_by_length.csv": csv_bytes(cer_by_length(truths, line_cer, count="clips"),
                                            ["length", "cer", "clips"]),
             "per_speaker.csv": csv_bytes(per_speaker(rows), ["speaker", "clips", "cer", "wer"])}
    worst = [i for i in order[:p.bad_cases] if line_cer[i] > 0]
    if worst and thumbnail is not None:
        files["bad_cases.png"] = bad_cases_png(
            [inputs[i] for i in worst],
            [f"{paths[i]}  truth: {truths[i]!r}  predicted: {preds[i]!r}" for i in worst],
            thumbnail)
    metrics = {k: round(v, 6) if isinstance(v, float) else v for k, v in metrics.items()}
    within = (f" (within the lexicon's {len(words)} words; greedy: CER "
              f"{metrics['cer_greedy']:.4f}, WER {metrics['wer_greedy']:.4f})" if words else "")
    summary = (f"test CER {metrics['cer']:.4f}, WER {metrics['wer']:.4f}{within} (beam {BEAM}: "
               f"CER {metrics['cer_beam']:.4f}, WER {metrics['wer_beam']:.4f}), clip accuracy "
               f"{metrics['clip_accuracy']:.4f} on {len(rows)} clips")
    return metrics, files, summary
