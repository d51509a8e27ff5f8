"""The segmentation task's part of the run report: mIoU/Dice per class, the pixel confusion
matrix and the overlay grid of the worst test images (image | truth | prediction)."""
from stages.report.facts import Facts, eval_file
from stages.report.html import card, comparison, esc, num, png_uri, table


def headline(facts: Facts) -> list:
    return [("test foreground mIoU", facts.eval.get("miou_foreground")),
            ("test mIoU", facts.eval.get("miou"))]


def sections(facts: Facts) -> list:
    return [("evaluation", "Evaluation", evaluation(facts))]


def evaluation(facts: Facts) -> str:
    per_class = eval_file(facts, "per_class.json")
    cm_rows = eval_file(facts, "confusion.csv")
    bad_rows = eval_file(facts, "bad_cases.csv")
    keys = ("miou_foreground", "miou", "dice_foreground", "dice", "pixel_accuracy", "samples")
    cards = "".join(card(k.replace("_", " "), f"eval.{k}", facts.eval[k]) for k in keys
                    if facts.eval.get(k) is not None)
    rows = []
    for c, m in per_class.items():
        iou = m["iou"]
        width = max(0.0, min(1.0, iou or 0.0)) * 100
        bar = f'<div class="bar"><span style="width:{width:.1f}%"></span></div>'
        rows.append(f"<tr><td>{esc(c)}</td>"
                    + (num(f"per_class.{c}.iou", iou) if iou is not None else "<td>n/a</td>")
                    + (num(f"per_class.{c}.dice", m["dice"]) if m["dice"] is not None
                       else "<td>n/a</td>")
                    + f"<td>{bar}</td>{num(f'per_class.{c}.pixels', m['pixels'])}</tr>")
    names = list(per_class)
    cm_html = []
    for r in cm_rows:
        total = sum(int(r[q]) for q in names) or 1
        cells = "".join(
            f'<td data-key="confusion.{esc(r["actual"])}.{esc(q)}" data-value="{r[q]}" '
            f'style="background:rgba({"37,99,235" if q == r["actual"] else "220,38,38"},'
            f'{0.05 + 0.8 * int(r[q]) / total:.3f})">{int(r[q]):,}</td>' for q in names)
        cm_html.append(f"<tr><th>{esc(r['actual'])}</th>{cells}</tr>")
    head = "".join(f"<th>{esc(q)}</th>" for q in names)
    chart = facts.eval_files.get("per_class_iou.png")
    sheet = facts.eval_files.get("bad_cases.png")
    def img(data, alt):
        return f'<img class="sheet" alt="{alt}" src="{png_uri(data)}">' if data else ""

    bad = [f"<tr><td><code>{esc(r['path'])}</code></td><td>{esc(r['miou'])}</td></tr>"
           for r in bad_rows]
    return f"""
<p class="lead">On the fixed test split, over its labelled pixels (the ignore value left out).
A class in neither the truth nor the prediction has no IoU and is left out of the means.</p>
<div class="cards">{cards}</div>{comparison(facts.eval)}
<div class="grid2">
<div><h3>Per class</h3>{table(["class", "IoU", "Dice", "", "pixels"], rows, "numeric")}
{img(chart, "per-class IoU and Dice")}</div>
<div><h3>Pixel confusion matrix <span class="muted small">(rows: actual, columns:
predicted)</span></h3>
<table class="confusion"><thead><tr><th></th>{head}</tr></thead>
<tbody>{''.join(cm_html)}</tbody></table></div>
</div>
<h3>Worst test images <span class="muted small">(lowest per-image mIoU; image | truth |
prediction)</span></h3>
{img(sheet, "worst test images: image, truth, prediction")}
{table(["path", "image mIoU"], bad, "narrow")}"""
