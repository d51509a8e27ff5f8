"""Markup helpers and the one stylesheet of the pipeline's HTML pages.

`style.css` (package data, beside this file) is inlined into every page: the run report and
validate's reports/validation.html, so each stays one self-contained file. Only the standard
library is imported here; validate imports this module too.
"""
import base64
import html
import json
from importlib import resources

# A metric whose name contains one of these is better when lower.
LOWER_IS_BETTER = ("loss", "ece", "error", "diff", "cer", "wer")


def stylesheet() -> str:
    """The text of style.css, read from the installed package."""
    return resources.files("stages.report").joinpath("style.css").read_text(encoding="utf-8")


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def fmt(value) -> str:
    """Numbers as people read them: 4 decimals, scientific notation when tiny or huge."""
    if isinstance(value, bool) or value is None:
        return str(value).lower() if isinstance(value, bool) else "-"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value == 0 or 1e-3 <= abs(value) < 1e5:
            return f"{value:.4f}"
        return f"{value:.2e}"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def num(key: str, value, cls: str = "") -> str:
    """A table cell holding a number, with its exact value in data-* for machines (tests)."""
    exact = json.dumps(value)
    klass = f' class="{cls}"' if cls else ""
    return f'<td{klass} data-key="{esc(key)}" data-value="{esc(exact)}">{esc(fmt(value))}</td>'


def card(label: str, key: str, value, note: str = "") -> str:
    return (f'<div class="card"><div class="label">{esc(label)}</div>'
            f'<div class="value" data-key="{esc(key)}" data-value="{esc(json.dumps(value))}">'
            f'{esc(fmt(value))}</div><div class="note">{esc(note)}</div></div>')


def metric_cards(metrics: dict, lower) -> str:
    """A card per number of `metrics` (bools left out), by key, marked "lower is better" where
    lower(key) says so."""
    return "".join(card(k.replace("_", " "), f"eval.{k}", v,
                        "lower is better" if lower(k) else "")
                   for k, v in sorted(metrics.items())
                   if isinstance(v, (int, float)) and not isinstance(v, bool))


def table(head: list[str], rows: list[str], cls: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    ths = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f"<table{klass}><thead><tr>{ths}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def png_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def class_key(name: str):
    """Natural order: 2 before 10 when class names are numbers."""
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def lower_is_better(name: str) -> bool:
    return any(word in name for word in LOWER_IS_BETTER)


def flatten(obj, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay values."""
    out = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def comparison(metrics: dict) -> str:
    """evaluate.compare_with: the earlier model's scores beside this one's, same test set
    (every task's evaluation section; "" without compare_with)."""
    other = metrics.get("compare_with")
    if not isinstance(other, dict):
        return ""
    rows = [f"<tr><td>{esc(k.replace('_', ' '))}</td>{num(f'eval.{k}', metrics[k])}"
            f"{num(f'eval.compare_with.{k}', other[k])}"
            f"{num(f'eval.delta.{k}', metrics[k] - other[k])}</tr>"
            for k in sorted(other) if isinstance(other[k], (int, float))
            and not isinstance(other[k], bool) and isinstance(metrics.get(k), (int, float))]
    return (f'<h3 id="compare-with">This model against <code>{esc(other.get("model", ""))}</code>'
            f' <span class="muted small">(evaluate.compare_with, the same test set)</span>'
            f'</h3>{table(["metric", "this model", "earlier model", "change"], rows, "numeric")}')


def document(title: str, header: str, body: str, footer: str = "") -> str:
    """A whole self-contained page: the stylesheet inline, no script, no external URL.

    header is the HTML inside <header> after its <h1>; body goes between it and the footer."""
    foot = f"<footer>{footer}</footer>\n" if footer else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<style>
{stylesheet()}</style></head>
<body>
<header><h1>{esc(title)}</h1>
{header}</header>
{body}{foot}</body></html>
"""
