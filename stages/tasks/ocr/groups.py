"""CER per group of lines (a font, for tools.synth_ocr's lines: the manifest's `group` column)
and for the groups training saw against those it never saw, around the task's metrics (they are
computed from evaluate's predictions.csv, so the decoder and the CER functions stay the shared
ones). Nothing is added when no test line has a group: the built-in sample's outs keep their
bytes."""
import csv
import io
from pathlib import Path

from stages.lib.io import csv_bytes, read_csv

MANIFEST = Path("data/manifest.csv")
TRAIN_SPLIT = Path("data/split/train.csv")
FIELDS = ["group", "seen", "lines", "characters", "cer", "line_accuracy"]


def group_metrics(predictions: bytes, scores, manifest=MANIFEST, train=TRAIN_SPLIT):
    """({metric: value} to add to eval.json, {file name: bytes}); empty when no test line of
    predictions.csv has a group in the manifest. scores: the task's scores(truths, preds)."""
    if not Path(manifest).exists():
        return {}, {}
    group_of = {r["path"]: r.get("group") or "" for r in read_csv(manifest)}
    rows = list(csv.DictReader(io.StringIO(predictions.decode("utf-8"))))
    if not any(group_of.get(r["path"]) for r in rows):
        return {}, {}
    seen = {group_of.get(r["path"], "") for r in read_csv(train)} if Path(train).exists() \
        else set()
    by = {}
    for r in rows:
        by.setdefault(group_of.get(r["path"], ""), []).append(r)
    table, metrics = [], {}
    for name, members in sorted(by.items()):
        s = scores([r["truth"] for r in members], [r["predicted"] for r in members])
        table.append({"group": name, "seen": "yes" if name in seen else "no",
                      "lines": s["lines"], "characters": s["characters"],
                      "cer": f"{s['cer']:.6f}", "line_accuracy": f"{s['line_accuracy']:.6f}"})
    for kind, want in (("seen", True), ("unseen", False)):
        members = [r for r in rows if (group_of.get(r["path"], "") in seen) == want]
        if members:
            s = scores([r["truth"] for r in members], [r["predicted"] for r in members])
            metrics[f"cer_{kind}_groups"] = round(s["cer"], 6)
            metrics[f"line_accuracy_{kind}_groups"] = round(s["line_accuracy"], 6)
            metrics[f"lines_{kind}_groups"] = s["lines"]
    return metrics, {"per_group.csv": csv_bytes(table, FIELDS)}


def summary(metrics: dict) -> str:
    parts = [f"{kind} groups CER {metrics[f'cer_{kind}_groups']:.4f} "
             f"({metrics[f'lines_{kind}_groups']} lines)"
             for kind in ("seen", "unseen") if f"cer_{kind}_groups" in metrics]
    return "; " + ", ".join(parts) if parts else ""
