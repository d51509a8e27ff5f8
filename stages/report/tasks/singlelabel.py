"""The single-label family's evaluation section (classification, audio): headline metrics,
per-class scores, confusion matrix and bad cases, from the files the family's evaluate writes
(stages/tasks/common/singlelabel/metrics.py)."""
from collections import Counter

from stages.report.facts import EVAL_DIR, Facts, eval_file
from stages.report.html import (class_key, comparison, esc, flatten, lower_is_better,
                                metric_cards, num, png_uri, table)

BAD_CASE_ROWS = 50  # rows of plots/eval/bad_cases.csv listed under the contact sheet
BAD_CASES_PNG = EVAL_DIR / "bad_cases.png"


def confusion_counts(rows: list[dict]) -> tuple[list[str], dict[tuple[str, str], int]]:
    counts = Counter((r["actual"], r["predicted"]) for r in rows)
    classes = sorted({c for pair in counts for c in pair}, key=class_key)
    return classes, dict(counts)


def evaluation(facts: Facts) -> str:
    per_class = eval_file(facts, "per_class.json")
    confusion_rows = eval_file(facts, "confusion.csv")
    bad_rows = eval_file(facts, "bad_cases.csv")
    bad_png = facts.eval_files.get(BAD_CASES_PNG.name)
    cards = metric_cards({k: v for k, v in flatten(facts.eval).items()
                          if not k.startswith("compare_with.")}, lower_is_better)
    classes = sorted(per_class, key=class_key)
    worst = min((per_class[c].get("f1", 1.0) for c in classes), default=1.0)
    class_rows = []
    for c in classes:
        m = per_class[c]
        f1 = m.get("f1", 0.0)
        width = max(0.0, min(1.0, f1)) * 100
        bar = f'<div class="bar"><span style="width:{width:.1f}%"></span></div>'
        class_rows.append(
            f'<tr class="{"flag" if f1 == worst and worst < 1 else ""}"><td>{esc(c)}</td>'
            + "".join(num(f"per_class.{c}.{k}", m[k]) for k in ("precision", "recall", "f1")
                      if k in m)
            + f"<td>{bar}</td>{num(f'per_class.{c}.support', m.get('support', 0))}</tr>")
    names, counts = confusion_counts(confusion_rows)
    cm_rows = []
    for a in names:
        total = sum(counts.get((a, p), 0) for p in names) or 1
        cells = []
        for p in names:
            n = counts.get((a, p), 0)
            share = n / total
            colour = (f"rgba(37,99,235,{0.08 + 0.85 * share:.3f})" if a == p
                      else f"rgba(220,38,38,{0.15 + 0.7 * share:.3f})") if n else "transparent"
            ink = "#fff" if a == p and share > 0.5 else "inherit"
            cells.append(f'<td style="background:{colour};color:{ink}" '
                         f'data-key="confusion.{esc(a)}.{esc(p)}" data-value="{n}">'
                         f'{n if n else ""}</td>')
        cm_rows.append(f"<tr><th>{esc(a)}</th>{''.join(cells)}</tr>")
    cm_head = "".join(f"<th>{esc(p)}</th>" for p in names)
    wrong = sum(n for (a, p), n in counts.items() if a != p)
    bad_table = [f"<tr><td><code>{esc(r.get('path', ''))}</code></td><td>{esc(r.get('true', ''))}"
                 f"</td><td>{esc(r.get('predicted', ''))}</td><td>{esc(r.get('confidence', ''))}"
                 f"</td><td class=\"muted\">{esc(r.get('top3', ''))}</td></tr>"
                 for r in bad_rows[:BAD_CASE_ROWS]]
    more = (f"<p class=\"muted\">... and {len(bad_rows) - BAD_CASE_ROWS} more in "
            f"{esc((EVAL_DIR / 'bad_cases.csv').as_posix())}.</p>"
            if len(bad_rows) > BAD_CASE_ROWS else "")
    sheet = (f'<img class="sheet" alt="misclassified test {facts.word("items")}" '
             f'src="{png_uri(bad_png)}">' if bad_png is not None
             else f'<p class="muted">{esc(BAD_CASES_PNG.as_posix())} not found.</p>')
    return f"""
<p class="lead">On the fixed test split: {len(confusion_rows):,} {facts.word("items")}, {wrong}
misclassified.</p>
<div class="cards">{cards}</div>{comparison(facts.eval)}
<div class="grid2">
<div><h3>Per class</h3>
{table(["class", "precision", "recall", "f1", "", "support"], class_rows, "numeric")}</div>
<div><h3>Confusion matrix <span class="muted small">(rows: actual, columns: predicted)</span></h3>
<table class="confusion" data-errors="{wrong}"><thead><tr><th></th>{cm_head}</tr></thead>
<tbody>{''.join(cm_rows)}</tbody></table></div>
</div>
<h3>Bad cases <span class="muted small">({len(bad_rows)} misclassified, most confident
first)</span></h3>
{sheet}
{table(["path", "actual", "predicted", "confidence", "top 3"], bad_table, "narrow")}{more}"""
