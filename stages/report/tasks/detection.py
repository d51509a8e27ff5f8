"""The detection task's part of the run report: mAP cards, AP per class, the PR curve, a grid
of test images with true (green) and predicted (red) boxes, and the bad cases."""
import json

from stages.report.facts import EVAL_DIR, Facts
from stages.report.html import card, comparison, esc, num, png_uri, table


def image(facts: Facts, name: str, alt: str) -> str:
    data = facts.eval_files.get(name)
    if data is None:
        return f'<p class="muted">{esc((EVAL_DIR / name).as_posix())} not found.</p>'
    return f'<img class="sheet" alt="{esc(alt)}" src="{png_uri(data)}">'


def headline(facts: Facts) -> list:
    return [("test mAP50", facts.eval.get("map50")),
            ("test mAP50-95", facts.eval.get("map"))]


def sections(facts: Facts) -> list:
    ev = facts.eval
    cards = "".join(card(label, f"eval.{key}", ev[key], "")
                    for key, label in (("map50", "mAP50"), ("map", "mAP50-95"),
                                       ("map75", "mAP75"), ("map_small", "AP small"),
                                       ("precision", "precision"), ("recall", "recall"))
                    if ev.get(key, -1) >= 0)  # AP small: -1 when the test set has none
    per_class = json.loads(facts.eval_files["per_class.json"]) \
        if "per_class.json" in facts.eval_files else {}
    rows = [f"<tr><td>{esc(c)}</td>{num(f'per_class.{c}.ap', v['ap'])}"
            f"{num(f'per_class.{c}.boxes', v['boxes'])}</tr>" for c, v in per_class.items()]
    html = f"""
<p class="lead">On the fixed test split: {ev.get('images', 0):,} images,
{ev.get('boxes', 0):,} boxes; precision and recall at score {ev.get('score_threshold')}.</p>
<div class="cards">{cards}</div>{comparison(facts.eval)}
<div class="grid2">
<div><h3>AP per class <span class="muted small">(COCO mAP@[.5:.95])</span></h3>
{table(["class", "AP", "boxes"], rows, "numeric")}</div>
<div><h3>Precision-recall</h3>{image(facts, "pr_curve.png", "precision-recall curve")}</div>
</div>
<h3>Test images <span class="muted small">(green: truth, red: predicted)</span></h3>
{image(facts, "predictions.png", "test images with boxes")}
<h3>Bad cases <span class="muted small">(missed objects and false positives)</span></h3>
{image(facts, "bad_cases.png", "bad cases")}"""
    return [("evaluation", "Evaluation", html)]
