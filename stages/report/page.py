"""The whole run report: the header, the generic sections, the task's sections, the footer."""
import importlib
from pathlib import Path

from stages.report import sections
from stages.report.facts import Facts
from stages.report.html import document, esc, fmt


TASKS = Path(__file__).resolve().parent / "tasks"  # each task's report module


def task_report(task):
    """The task's module of stages/report/tasks/ (headline and sections), or None when it has
    none (a user's own task package): its page then has only the generic parts."""
    if not (TASKS / f"{task.name}.py").is_file():
        return None
    return importlib.import_module(f"stages.report.tasks.{task.name}")


def all_sections(facts: Facts, task) -> list[tuple[str, str, str]]:
    """Generic sections before, then the task's own (for classification, the evaluation),
    then generic after."""
    own = task_report(task)
    return ([(key, title, make(facts)) for key, title, make in sections.BEFORE]
            + (own.sections(facts) if own else [])
            + [(key, title, make(facts)) for key, title, make in sections.AFTER])


def trained_on(value) -> str | None:
    """"cpu, deterministic, fp32" from the model's trained_on metadata (None when absent)."""
    if not isinstance(value, dict):
        return None
    how = "deterministic" if value.get("deterministic") else "not deterministic"
    return f"{value.get('device')}, {how}, {value.get('precision')}"


def render(facts: Facts, task) -> str:
    """The page, with the run's task's sections and headline numbers (the stage looks the task
    up: this floor is below the tasks). facts.git and facts.experiments are given only for the
    (untracked) human page."""
    parts = all_sections(facts, task)
    total = sum(sum(v.values()) for v in facts.split.values())
    own = task_report(task)
    items = facts.word("items")
    tops = [*(own.headline(facts) if own else []), (f"test {items}", facts.eval.get("samples")),
            (items, total), ("ONNX parity", facts.export.get("parity")),
            ("kernels", facts.onnx["metadata"].get("kernels")),
            ("trained on", trained_on(facts.onnx["metadata"].get("trained_on"))),
            ("ONNX max |diff|", (facts.measured or {}).get("max_abs_diff"))]
    head = "".join(f"<div>{esc(label)}<b>{esc(fmt(v))}</b></div>" for label, v in tops
                   if v is not None)
    nav = "".join(f'<a href="#{key}">{esc(title)}</a>' for key, title, _ in parts)
    body = "".join(f'<section id="{key}"><h2>{esc(title)}</h2>{html}</section>\n'
                   for key, title, html in parts)
    meta = facts.onnx["metadata"]
    what = (f"\n{len(meta['classes'])} classes" if "classes" in meta
            else f" task {esc(facts.task)}")
    title = "Run report" if facts.experiments is None else "Run report with experiments"
    header = f"""<div class="sub">{esc(facts.inputs)},{what} &middot; data \
<code>{facts.manifest_sha256[:12]}</code> &middot; params
<code>{facts.params_sha256[:12]}</code> &middot; code <code>{facts.code_sha256[:12]}</code>
</div>
<div class="headline">{head}</div>"""
    footer = ("Written by <code>python -m stages.report</code> from the run's own outputs; "
              "no network\nneeded to view it.")
    return document(title, header, f"<nav>{nav}</nav>\n<main>\n{body}</main>\n", footer)
