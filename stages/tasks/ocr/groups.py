"""CER per group of lines (a font, for tools.synth_ocr's lines: the manifest's `group` column)
and for the groups training saw against those it never saw, around the task's metrics (they are
computed from evaluate's predictions.csv, so the decoder and the CER functions stay the shared
ones). Nothing is added when no test line has a group: the built-in sample's outs keep their
bytes.

A held-out renderer's lines (tools.synth_ocr --test-set) carry a faceted group,
`renderer=NAME;font=FONT;crop=TIGHTNESS` (font and crop when its list names them): they are
kept out of the seen/unseen figures (those are the training renderer's) and scored on their own:
`cer_held_out_renderer` (and line accuracy, lines), on the fonts training saw and did not, per
crop tightness, and per renderer, font and crop in per_renderer.csv; with several held-out
renderers, `cer_held_out_renderer_<name>` of each (the breakdowns in per_renderer.csv only).
Without such lines nothing of it is written."""
import csv
import io
from pathlib import Path

from stages.lib.io import csv_bytes, read_csv

MANIFEST = Path("data/manifest.csv")
TRAIN_SPLIT = Path("data/split/train.csv")
FIELDS = ["group", "seen", "lines", "characters", "cer", "line_accuracy"]
RENDERER_FIELDS = ["renderer", "by", "value", "seen", "lines", "characters", "cer",
                   "line_accuracy"]


def facets(group: str) -> dict | None:
    """{key: value} of a faceted group (`renderer=...;font=...`), None for a plain one."""
    if "renderer=" not in group:
        return None
    return dict(part.split("=", 1) for part in group.split(";") if "=" in part)


def group_metrics(predictions: bytes, scores, manifest=MANIFEST, train=TRAIN_SPLIT):
    """({metric: value} to add to eval.json, {file name: bytes}); empty when no test line of
    predictions.csv has a group in the manifest. scores: the task's scores(truths, preds)."""
    if not Path(manifest).exists():
        return {}, {}
    group_of = {r["path"]: r.get("group") or "" for r in read_csv(manifest)}
    every = list(csv.DictReader(io.StringIO(predictions.decode("utf-8"))))
    if not any(group_of.get(r["path"]) for r in every):
        return {}, {}
    seen = {group_of.get(r["path"], "") for r in read_csv(train)} if Path(train).exists() \
        else set()
    rows = [r for r in every if facets(group_of.get(r["path"], "")) is None]
    other = [r for r in every if facets(group_of.get(r["path"], "")) is not None]
    metrics, files = {}, {}
    if rows:
        metrics, files = own_renderer(rows, group_of, seen, scores)
    if other:
        more, table = held_out_renderer(other, group_of, seen, scores)
        metrics.update(more)
        files["per_renderer.csv"] = csv_bytes(table, RENDERER_FIELDS)
    return metrics, files


def own_renderer(rows, group_of, seen, scores):
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


def held_out_renderer(rows, group_of, seen, scores):
    """(metrics, per_renderer.csv rows) of the lines of a renderer training never saw."""
    def score(members):
        return scores([r["truth"] for r in members], [r["predicted"] for r in members])

    fac = {r["path"]: facets(group_of[r["path"]]) for r in rows}
    s = score(rows)
    metrics = {"cer_held_out_renderer": round(s["cer"], 6),
               "line_accuracy_held_out_renderer": round(s["line_accuracy"], 6),
               "lines_held_out_renderer": s["lines"]}
    cells = {}
    for r in rows:
        f = fac[r["path"]]
        font_seen = "" if "font" not in f else ("yes" if f["font"] in seen else "no")
        for by in ("font", "crop", "fonts seen"):
            value = font_seen if by == "fonts seen" else f.get(by, "")
            if value:
                cells.setdefault((f["renderer"], by, value), []).append(r)
    names = sorted({fac[r["path"]]["renderer"] for r in rows})
    one = len(names) == 1  # one renderer: its breakdown in eval.json too
    if not one:  # several: each one's own CER and lines in eval.json
        for name in names:
            key = "".join(c if c.isalnum() else "_" for c in name.lower())
            s = score([r for r in rows if fac[r["path"]]["renderer"] == name])
            metrics[f"cer_held_out_renderer_{key}"] = round(s["cer"], 6)
            metrics[f"lines_held_out_renderer_{key}"] = s["lines"]
    table = []
    for (renderer, by, value), members in sorted(cells.items()):
        s = score(members)
        seen_col = ("yes" if value in seen else "no") if by == "font" else \
            value if by == "fonts seen" else ""
        table.append({"renderer": renderer, "by": by, "value": value, "seen": seen_col,
                      "lines": s["lines"], "characters": s["characters"],
                      "cer": f"{s['cer']:.6f}", "line_accuracy": f"{s['line_accuracy']:.6f}"})
        if one and by != "font":
            key = f"crop_{value}" if by == "crop" else \
                ("seen_fonts" if value == "yes" else "unseen_fonts")
            metrics[f"cer_held_out_renderer_{key}"] = round(s["cer"], 6)
            metrics[f"lines_held_out_renderer_{key}"] = s["lines"]
    return metrics, table


def summary(metrics: dict) -> str:
    parts = [f"{kind} groups CER {metrics[f'cer_{kind}_groups']:.4f} "
             f"({metrics[f'lines_{kind}_groups']} lines)"
             for kind in ("seen", "unseen") if f"cer_{kind}_groups" in metrics]
    if "cer_held_out_renderer" in metrics:
        parts.append(f"held-out renderer CER {metrics['cer_held_out_renderer']:.4f} "
                     f"({metrics['lines_held_out_renderer']} lines)")
    return "; " + ", ".join(parts) if parts else ""
