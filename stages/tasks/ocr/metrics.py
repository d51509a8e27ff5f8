"""OCR evaluation on the fixed test split: CER and WER (jiwer, stages/tasks/common/ctc.py), word and
line accuracy, how well the greedy confidence tells right lines from wrong ones
(confidence_auroc, confidence_right, confidence_wrong: ctc.confidence_scores), accuracy per
character class, character confusions, the CER distribution and
the worst lines.

The truth is the transcript in data/split/test.csv (not the encoded target, which drops
characters the training split never had: those count as errors here).
"""
from collections import Counter
from pathlib import Path

from stages.tasks.common.ctc import cer_by_length, confidence_scores, greedy, scores
from stages.lib.io import csv_bytes, json_bytes, read_csv

TEST_SPLIT = Path("data/split/test.csv")
CER_BINS = ((0.0, 0.0), (0.0, 0.1), (0.1, 0.25), (0.25, 0.5), (0.5, float("inf")))


def char_class(c: str) -> str:
    if c.isdigit():
        return "digit"
    if c == " ":
        return "space"
    if c.isascii() and c.isalpha():
        return "upper" if c.isupper() else "lower"
    if c.isascii():
        return "punctuation"
    return "cjk" if "\u3000" <= c <= "\u9fff" else "other"


def char_errors(truth: str, pred: str):
    """(truth positions that are wrong, [(truth char or "", predicted char or "")] confusions)."""
    from rapidfuzz.distance import Levenshtein

    wrong, pairs = set(), []
    for op in Levenshtein.editops(truth, pred):
        if op.tag == "replace":
            wrong.add(op.src_pos)
            pairs.append((truth[op.src_pos], pred[op.dest_pos]))
        elif op.tag == "delete":
            wrong.add(op.src_pos)
            pairs.append((truth[op.src_pos], ""))
        else:
            pairs.append(("", pred[op.dest_pos]))
    return wrong, pairs


def evaluate(outputs, paths, images, meta, p):
    from stages.tasks.common.ctc import distance
    from stages.tasks.ocr.render import bad_cases_png

    truth_of = {r["path"]: r["text"] for r in read_csv(TEST_SPLIT)}
    truths = [truth_of[s] for s in paths]
    decoded = greedy(outputs, meta["charset"])
    preds = [t for t, _ in decoded]
    metrics = scores(truths, preds)
    metrics.update(confidence_scores([c for _, c in decoded],
                                     [t == q for t, q in zip(truths, preds, strict=True)]))
    line_cer = [distance(t, q) / max(len(t), 1) for t, q in zip(truths, preds, strict=True)]
    per_class, wrong_class, confusions = Counter(), Counter(), Counter()
    for t, q in zip(truths, preds, strict=True):
        wrong, pairs = char_errors(t, q)
        for i, c in enumerate(t):
            per_class[char_class(c)] += 1
            wrong_class[char_class(c)] += i in wrong
        confusions.update(pairs)
    metrics["per_class_accuracy"] = {k: round(1 - wrong_class[k] / per_class[k], 6)
                                     for k in sorted(per_class)}
    rows = [{"path": s, "truth": t, "predicted": q, "cer": f"{c:.4f}", "confidence": f"{f:.4f}"}
            for s, t, q, c, (_, f) in zip(paths, truths, preds, line_cer, decoded, strict=True)]
    order = sorted(range(len(rows)), key=lambda i: (-line_cer[i], decoded[i][1], paths[i]))
    bad = [rows[i] for i in order if line_cer[i] > 0]
    hist = [{"bin": f"{lo:g}" if lo == hi else f"({lo:g}, {hi:g}]",
             "lines": sum((c == lo) if lo == hi else (lo < c <= hi) for c in line_cer)}
            for lo, hi in CER_BINS]
    pairs = [{"truth": a, "predicted": b, "count": n}
             for (a, b), n in sorted(confusions.items(), key=lambda kv: (-kv[1], kv[0]))]
    fields = ["path", "truth", "predicted", "cer", "confidence"]
    files = {"predictions.csv": csv_bytes(rows, fields),
             "bad_cases.csv": csv_bytes(bad, fields),
             "cer_distribution.csv": csv_bytes(hist, ["bin", "lines"]),
             "confusions.csv": csv_bytes(pairs, ["truth", "predicted", "count"]),
             "per_class.json": json_bytes(metrics["per_class_accuracy"]),
             "cer_by_length.csv": csv_bytes(cer_by_length(truths, line_cer),
                                            ["length", "cer", "lines"])}
    worst = [i for i in order[:p.bad_cases] if line_cer[i] > 0]
    if worst:
        files["bad_cases.png"] = bad_cases_png([images[i] for i in worst],
                                               [truths[i] for i in worst],
                                               [preds[i] for i in worst])
    metrics = {k: round(v, 6) if isinstance(v, float) else v for k, v in metrics.items()}
    summary = (f"test CER {metrics['cer']:.4f}, WER {metrics['wer']:.4f}, line accuracy "
               f"{metrics['line_accuracy']:.4f} on {len(rows)} lines")
    return metrics, files, summary
