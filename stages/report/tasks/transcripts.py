"""What the CTC-text tasks' evaluation sections (ocr, speech) share: the lead line over the
metric cards, and the sheet of the worst items (truth against prediction)."""
from stages.report.html import comparison, metric_cards, png_uri


def lead(facts, items: str, wrong: int, lower) -> str:
    """The lead line (how many `items`, e.g. "lines", and how many of them are wrong), the
    metric cards (lower(key): lower is better) and the comparison with evaluate.compare_with."""
    return (f'\n<p class="lead">On the fixed test split: {facts.eval.get(items, 0):,} {items},\n'
            f'{wrong} with at least one error.{confidence(facts.eval, items)}</p>\n'
            f'<div class="cards">{metric_cards(facts.eval, lower)}</div>{comparison(facts.eval)}')


def confidence(metrics: dict, items: str) -> str:
    """How well the confidence predict and serve answer ranks right `items` above wrong ones
    (evaluate's confidence_auroc, confidence_right, confidence_wrong; confidence_views: how many
    test-time views it reads), or "" when evaluate did not measure it (every item right, or
    every one wrong; an older run)."""
    area = metrics.get("confidence_auroc")
    if not isinstance(area, (int, float)):
        return ""
    views = metrics.get("confidence_views")
    read = f" (from the clip and {views} test-time views of it)" if views else ""
    return (f" The confidence predict and serve answer{read} ranks a right one above a wrong one "
            f"with probability {area:.3f} (AUROC of correctness); its mean is "
            f"{metrics['confidence_right']:.3f} on right {items}, "
            f"{metrics['confidence_wrong']:.3f} on wrong ones.")


def worst_sheet(facts, alt: str, item: str) -> str:
    """plots/eval/bad_cases.png inlined, or a line saying no `item` is wrong."""
    png = facts.eval_files.get("bad_cases.png")
    return (f'<img class="sheet" alt="{alt}" src="{png_uri(png)}">' if png
            else f'<p class="muted">No {item} is wrong.</p>')
