"""The OCR task's part of the run report: headline metrics, accuracy per character class, the
CER distribution, the worst lines (image, truth, prediction) and the most frequent character
confusions."""
from stages.report.facts import eval_file
from stages.report.html import esc, lower_is_better, num, table
from stages.report.tasks.transcripts import lead, worst_sheet

ROWS = 20


def lower(key: str) -> bool:
    """Whether a lower value of metrics/eval.json's key is better."""
    return lower_is_better(key) or key in ("cer", "wer")


def headline(facts) -> list:
    return [("test CER", facts.eval.get("cer")),
            ("line accuracy", facts.eval.get("line_accuracy"))]


def sections(facts) -> list[tuple[str, str, str]]:
    return [("evaluation", "Evaluation", evaluation(facts))]


def evaluation(facts) -> str:
    per_class = eval_file(facts, "per_class.json")
    class_rows = [f"<tr><td>{esc(c)}</td>{num(f'per_class.{c}', a)}</tr>"
                  for c, a in per_class.items()]
    hist = eval_file(facts, "cer_distribution.csv")
    hist_rows = [f"<tr><td>{esc(r['bin'])}</td>{num('cer_bins.' + r['bin'], int(r['lines']))}"
                 f"</tr>" for r in hist]
    bad = eval_file(facts, "bad_cases.csv")
    bad_rows = [f"<tr><td><code>{esc(r['path'])}</code></td><td>{esc(r['truth'])}</td>"
                f"<td>{esc(r['predicted'])}</td><td>{esc(r['cer'])}</td>"
                f"<td>{esc(r['confidence'])}</td></tr>" for r in bad[:ROWS]]
    pairs = eval_file(facts, "confusions.csv")
    pair_rows = [f"<tr><td>{esc(repr(r['truth']) if r['truth'] else '(inserted)')}</td>"
                 f"<td>{esc(repr(r['predicted']) if r['predicted'] else '(deleted)')}</td>"
                 f"<td>{esc(r['count'])}</td></tr>" for r in pairs[:ROWS]]
    groups = eval_file(facts, "per_group.csv") if "per_group.csv" in facts.eval_files else []
    group_rows = [f"<tr><td>{esc(r['group'])}</td><td>{esc(r['seen'])}</td>"
                  f"{num('per_group.' + r['group'] + '.cer', float(r['cer']))}"
                  f"{num('per_group.' + r['group'] + '.lines', int(r['lines']))}</tr>"
                  for r in groups]
    group_html = (f"<h3>CER per group <span class=\"muted small\">(a font, for synthetic lines; "
                  f"seen: training had lines of it)</span></h3>"
                  f"{table(['group', 'seen in train', 'CER', 'lines'], group_rows, 'narrow')}"
                  if group_rows else "")
    renderer_html = held_out_renderer(facts)
    sheet = worst_sheet(facts, "worst test lines: image, truth, prediction", "line")
    return lead(facts, "lines", len(bad), lower) + f"""
<div class="grid2">
<div><h3>Accuracy per character class</h3>
{table(["class", "accuracy"], class_rows, "numeric")}</div>
<div><h3>CER distribution <span class="muted small">(lines per CER bin)</span></h3>
{table(["CER", "lines"], hist_rows, "numeric")}</div>
</div>{group_html}{renderer_html}
<h3>Worst lines <span class="muted small">(highest CER first; black: truth, red: prediction)
</span></h3>
{sheet}
{table(["path", "truth", "predicted", "CER", "confidence"], bad_rows, "narrow")}
<h3>Character confusions <span class="muted small">(truth -> predicted, most frequent
first)</span></h3>
{table(["truth", "predicted", "count"], pair_rows, "narrow")}"""


def held_out_renderer(facts) -> str:
    """The held-out renderer's CER per font (seen in train or not), per crop tightness and on
    the fonts seen against unseen (plots/eval/per_renderer.csv; "" without it)."""
    if "per_renderer.csv" not in facts.eval_files:
        return ""
    rows = [f"<tr><td>{esc(r['renderer'])}</td><td>{esc(r['by'])}</td>"
            f"<td>{esc(r['value'])}</td><td>{esc(r['seen'])}</td>"
            f"{num('per_renderer.' + r['renderer'] + '.' + r['value'] + '.cer', float(r['cer']))}"
            f"{num('per_renderer.' + r['renderer'] + '.' + r['value'] + '.lines', int(r['lines']))}"
            f"</tr>" for r in eval_file(facts, "per_renderer.csv")]
    return (f"<h3>Held-out renderer <span class=\"muted small\">(test lines another renderer "
            f"drew: per font, crop tightness, fonts seen in train or not)</span></h3>"
            f"{table(['renderer', 'by', 'value', 'font seen', 'CER', 'lines'], rows, 'narrow')}")
