"""reports/validation.html, written by the validate stage: every problem by check, and the class
counts, on one self-contained page with the run report's stylesheet.

Only the standard library is imported: validate calls this after its checks have run.
"""
from stages.report.html import document, esc, num, table

# (id, title, kind, what a finding of that kind does)
GROUPS = [("dataset", "Blocking: dataset", "dataset",
           "Class-level problems: quarantining files cannot fix them, so they always stop the "
           "pipeline."),
          ("files", "Blocking: files", "blocking",
           "These files must not be trained on: the pipeline stops, or with "
           "<code>validate.on_error: quarantine</code> they are listed in "
           "<code>data/quarantine.csv</code> and left out."),
          ("warnings", "Warnings", "warning", "Odd but usable: the files are used.")]


def page(summary: dict, result: dict, policy: str, declared: dict, items: str = "files") -> str:
    """The page for validate's summary (metrics/validation.json) and check_all's result.

    declared: {check: (kind, description)}, checks.all_checks(task); items: what the task's
    inputs are called (its modality's WORDS: images, clips)."""
    found = {"dataset": result["dataset"], "blocking": result["issues"],
             "warning": result["issues"]}
    header = (f'<div class="sub">{summary["files"]:,} files: {summary["valid"]:,} usable, '
              f'{summary["invalid"]:,} blocking, {summary["warned"]:,} usable with warnings. '
              f"Policy <code>validate.on_error: {esc(policy)}</code>.</div>\n"
              '<div class="headline">' + "".join(
                  f"<div>{esc(label)}<b>{value:,}</b></div>" for label, value in (
                      ("files", summary["files"]), ("usable", summary["valid"]),
                      ("blocking", summary["invalid"]), ("with warnings", summary["warned"]),
                      ("classes", len(summary["per_class"])))) + "</div>")
    parts = [("classes", "Classes", table(
        ["class", f"usable {items}"],
        [f"<tr><td>{esc(c)}</td>{num(f'class.{c}', n)}</tr>"
         for c, n in summary["per_class"].items()], "numeric narrow"))]
    for key, title, kind, note in GROUPS:
        parts.append((key, title, group(kind, note, found[kind], declared)))
    nav = "".join(f'<a href="#{key}">{esc(title)}</a>' for key, title, _ in parts)
    body = "".join(f'<section id="{key}"><h2>{esc(title)}</h2>{html}</section>\n'
                   for key, title, html in parts)
    return document("Data validation", header, f"<nav>{nav}</nav>\n<main>\n{body}</main>\n")


def group(kind: str, note: str, issues: dict, declared: dict) -> str:
    """Every check of one kind: the ones that found something with each file (or class) and
    its reason, then the names of those that found nothing."""
    names = [name for name, (k, _) in declared.items() if k == kind]
    shown = [c for c in names if issues.get(c)]
    badge = "warn" if kind == "warning" else "bad"
    verdict = (f'<span class="badge {badge}">{len(shown)} of {len(names)} checks found '
               "something</span>" if shown else
               f'<span class="badge ok">all {len(names)} checks passed</span>')
    parts = [f'<p class="lead">{note} {verdict}</p>']
    for check in shown:
        rows = [f"<tr><td><code>{esc(k)}</code></td><td>{esc(v)}</td></tr>"
                for k, v in sorted(issues[check].items())]
        parts.append(f'<h3 id="check-{esc(check)}">{esc(check)} <span class="muted small">'
                     f"({len(issues[check]):,}) {esc(declared[check][1])}"
                     "</span></h3>" + table(["file / class", "reason"], rows))
    passed = " ".join(f'<span class="param" title="{esc(declared[c][1])}">'
                      f"{esc(c)}</span>" for c in names if not issues.get(c))
    parts.append(f'<p class="muted small">Found nothing: {passed or "none"}</p>')
    return "\n".join(parts)
