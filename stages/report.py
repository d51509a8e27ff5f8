"""The run report: one self-contained page with everything a reviewer asks about a run.

`reports/run.html` (the last DVC stage) is built only from the run's own outs: provenance (data,
params, code and environment hashes; the params that differ from the defaults highlighted), the
data (class counts per split, the validation summary, a link to reports/validation.html),
training curves (every dvclive tsv under plots/train/plots/metrics/ becomes a curve, so a new
metric appears without code changes), the evaluation (headline, per-class table, confusion
matrix, bad cases) and the export (parity numbers, ONNX size and metadata).

The page is a DVC out, so it is deterministic: no timestamp, hostname, absolute path or git
commit in it (a commit is made after the run, so it cannot be an input of the run; the hashes
name the code, data and params instead). Two things change without the run changing: the git
commit and the list of experiments. `--experiments` writes a second page for humans,
reports/experiments.html (not tracked), that adds both: the commit with its dirty flag and the
table of `dvc exp show --json` with the best value per headline metric marked.

Self-contained: images are inline data: URIs (matplotlib Agg PNGs without a Software/date
chunk, so the same numbers give the same bytes), CSS is inline, there is no script and no
external URL, so the page renders offline and in any sandbox.
"""
import base64
import html
import json
import os
from pathlib import Path

import click

from stages.lib.io import StageError, read_csv, read_json, write_bytes
from stages.lib.params import PARAMS_FILE, SECTIONS, load, params_option

OUT = Path("reports/run.html")
EXPERIMENTS_OUT = Path("reports/experiments.html")
VALIDATION_HTML = Path("reports/validation.html")
MANIFEST = Path("data/manifest.csv")
QUARANTINE = Path("data/quarantine.csv")
VALIDATION = Path("metrics/validation.json")
SPLIT = Path("metrics/split.json")
CURVES = Path("plots/train/plots/metrics")
TRAIN = Path("metrics/train.json")
EVAL = Path("metrics/eval.json")
EVAL_PER_CLASS = Path("plots/eval/per_class.json")
CONFUSION = Path("plots/eval/confusion.csv")
BAD_CASES = Path("plots/eval/bad_cases.csv")
BAD_CASES_PNG = Path("plots/eval/bad_cases.png")
EXPORT = Path("metrics/export.json")
ONNX = Path("models/model.onnx")
LOCK = Path("requirements.lock")
CODE_DIR = Path("stages")
# Versions shown in the environment table (distribution names, as in requirements.lock).
KEY_PACKAGES = ("torch", "torchvision", "numpy", "pillow", "scikit-learn", "onnx",
                "onnxruntime", "dvc", "dvclive", "great-expectations", "matplotlib")
# A metric whose name contains one of these is better when lower.
LOWER_IS_BETTER = ("loss", "ece", "error", "diff")
# Counts, not scores: shown, never ranked.
NOT_RANKED = ("samples", "epochs", "support")
BAD_CASE_ROWS = 50  # rows of plots/bad_cases.csv listed under the contact sheet
SECTION_TITLES = {"provenance": "Provenance", "data": "Data", "training": "Training",
                  "evaluation": "Evaluation", "export": "Export", "experiments": "Experiments"}


# ---------------------------------------------------------------- formatting


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


# ---------------------------------------------------------------- inputs


def sha256(path) -> str:
    from stages.lib.provenance import file_sha256

    digest = file_sha256(path)
    if not digest:
        raise StageError(f"{path} not found: run the stage that writes it first (`dvc repro`).")
    return digest


def code_hashes(root=CODE_DIR) -> tuple[str, list[tuple[str, str]]]:
    """sha256 of every .py file of the pipeline's code (sorted), and one hash over them all."""
    import hashlib

    from stages.lib.provenance import file_sha256

    files = sorted(p.as_posix() for p in Path(root).rglob("*.py") if "__pycache__" not in p.parts)
    pairs = [(f, file_sha256(f)) for f in files]
    total = hashlib.sha256("".join(f"{f}\0{h}\n" for f, h in pairs).encode()).hexdigest()
    return total, pairs


def lock_versions(path=LOCK) -> dict[str, str]:
    """{normalised name: version} of the `name==version` lines of requirements.lock."""
    pins = {}
    if Path(path).is_file():
        for line in Path(path).read_text().splitlines():
            name, sep, version = line.split("#")[0].strip().partition("==")
            if sep:
                pins[normalise(name)] = version.strip()
    return pins


def normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed_versions(names=KEY_PACKAGES) -> dict[str, str]:
    from importlib import metadata

    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = ""
    return versions


def all_params(params_path) -> list[tuple[str, object, object]]:
    """[(section.key, value, default)] for every key of every section, in declaration order."""
    import dataclasses

    rows = []
    for section, cls in SECTIONS.items():
        values, defaults = load(section, params_path), cls()
        for field in dataclasses.fields(cls):
            rows.append((f"{section}.{field.name}", getattr(values, field.name),
                         getattr(defaults, field.name)))
    return rows


def params_sha256(params_path) -> str:
    from stages.lib.provenance import params_hash

    return params_hash({section: params_hash(load(section, params_path)) for section in SECTIONS})


def read_curves(root=CURVES) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """{metric: {series: [(step, value)]}} from every dvclive tsv under root.

    plots/train/plots/metrics/val/loss.tsv is series "val" of metric "loss"; a tsv at the top
    (lr.tsv) is its own series. The value column is the one named after the file (or the first
    that is not step/timestamp)."""
    import csv

    root = Path(root)
    files = sorted(root.rglob("*.tsv"))
    if not files:
        raise StageError(f"no training curves (*.tsv) under {root}: run the train stage first "
                         "(`dvc repro train`).")
    curves: dict[str, dict] = {}
    for path in files:
        rel = path.relative_to(root).with_suffix("")
        metric, series = rel.name, "/".join(rel.parts[:-1]) or rel.name
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        columns = [c for c in (rows[0] if rows else {}) if c not in ("step", "timestamp")]
        column = metric if metric in columns else (columns[0] if columns else None)
        if column is None or any("step" not in r for r in rows):
            raise StageError(f"{path}: expected a dvclive tsv with a `step` column and a value "
                             "column; delete it or re-run the train stage.")
        try:
            points = [(float(r["step"]), float(r[column])) for r in rows]
        except ValueError as exc:
            raise StageError(f"{path}: not a number in the `step` or `{column}` column ({exc}); "
                             "re-run the train stage.") from exc
        curves.setdefault(metric, {})[series] = points
    return curves


def onnx_facts(path=ONNX) -> dict:
    """Size, hash, graph signature and decoded metadata of the exported model."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise StageError(f"{path} not found: run the export stage first (`dvc repro export`).")
    model = onnx.load(str(path), load_external_data=False)

    def signature(values):
        out = []
        for v in values:
            dims = [d.dim_param or str(d.dim_value) for d in v.type.tensor_type.shape.dim]
            out.append(f"{v.name} [{', '.join(dims)}]")
        return out

    meta = {}
    for prop in model.metadata_props:
        try:
            meta[prop.key] = json.loads(prop.value)
        except ValueError:
            meta[prop.key] = prop.value
    return {"bytes": path.stat().st_size, "sha256": sha256(path),
            "ir_version": model.ir_version, "producer": f"{model.producer_name} "
            f"{model.producer_version}".strip(),
            "opsets": sorted(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import),
            "inputs": signature(model.graph.input), "outputs": signature(model.graph.output),
            "metadata": dict(sorted(meta.items()))}


def confusion_counts(rows: list[dict]) -> tuple[list[str], dict[tuple[str, str], int]]:
    from collections import Counter

    counts = Counter((r["actual"], r["predicted"]) for r in rows)
    classes = sorted({c for pair in counts for c in pair}, key=class_key)
    return classes, dict(counts)


# ---------------------------------------------------------------- charts


def curve_png(metric: str, series: dict[str, list[tuple[float, float]]]) -> bytes:
    """One chart per metric, one line per series: same numbers, same bytes."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.6, 3.0), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    colours = {"train": "#2563eb", "val": "#ea580c", "test": "#16a34a"}
    values = []
    for name, points in sorted(series.items()):
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        values += ys
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.6, label=name,
                color=colours.get(name.split("/")[0]))
    if "loss" in metric and values and min(values) > 0 and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.set_title(metric, fontsize=11)
    ax.set_xlabel("epoch (step)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.tick_params(labelsize=8)
    if ax.get_yscale() == "linear":
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
    if len(series) > 1 or metric not in series:
        ax.legend(fontsize=8, frameon=False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


# ---------------------------------------------------------------- sections


def provenance_section(params_path, onnx: dict, git: dict | None) -> str:
    manifest_sha = sha256(MANIFEST)
    files = len(read_csv(MANIFEST))
    code_total, code_files = code_hashes()
    params_rows = all_params(params_path)
    changed = [r for r in params_rows if r[1] != r[2]]
    lock = lock_versions()
    installed = installed_versions()
    model_meta = onnx["metadata"]

    def check(expected, actual):
        if not expected:
            return ""
        ok = expected == actual
        return (f' <span class="badge {"ok" if ok else "bad"}">'
                f'{"matches the ONNX metadata" if ok else "differs from the ONNX metadata"}</span>')

    if git is None:
        commit = ('<td class="muted">not in this page: it is a DVC out, and a commit made after '
                  'the run cannot be its input. The hashes below name the code, data and params; '
                  '<code>python -m stages.report --experiments</code> writes '
                  '<code>reports/experiments.html</code> with the commit.</td>')
    else:
        state = {True: "uncommitted changes", False: "clean", None: "not a git repository"}
        commit = (f'<td><code data-key="git.commit">{esc(git["git_commit"] or "-")}</code> '
                  f'<span class="badge {"bad" if git["git_dirty"] else "ok"}">'
                  f'{esc(state[git["git_dirty"]])}</span></td>')
    ident = [
        f"<tr><th>git commit</th>{commit}</tr>",
        f'<tr><th>data version</th><td><code data-key="manifest_sha256">{manifest_sha}</code>'
        f"{check(model_meta.get('manifest_sha256'), manifest_sha)}"
        f'<div class="muted">sha256 of {esc(MANIFEST.as_posix())}: {files:,} files</div></td></tr>',
        f'<tr><th>params</th><td><code data-key="params_sha256">{params_sha256(params_path)}'
        f'</code><div class="muted">sha256 over every section of {esc(PARAMS_FILE)}; '
        f"{len(changed)} of {len(params_rows)} values differ from the defaults</div></td></tr>",
        f'<tr><th>code</th><td><code data-key="code_sha256">{code_total}</code>'
        f'<div class="muted">sha256 over the {len(code_files)} Python files of '
        f"{esc(CODE_DIR.as_posix())}/ (per file below)</div></td></tr>",
        f'<tr><th>model</th><td><code data-key="model_sha256">'
        f'{esc(model_meta.get("model_sha256", "-"))}</code>'
        f'<div class="muted">sha256 of models/model.pt, as recorded in the ONNX metadata; '
        f'export code <code>{esc(model_meta.get("code_sha256", "-"))}</code></div></td></tr>',
        f'<tr><th>environment</th><td><code data-key="requirements_lock_sha256">{sha256(LOCK)}'
        f'</code><div class="muted">sha256 of {esc(LOCK.as_posix())}</div></td></tr>',
    ]
    import platform

    versions = [f'<span class="param" data-key="version.python">python '
                f"<b>{esc(platform.python_version())}</b></span>"]
    for name, version in installed.items():
        pinned = lock.get(normalise(name), "")
        differs = bool(pinned) and version != pinned
        note = (f' <span class="was">lock pins {esc(pinned)}</span>' if differs
                else "" if pinned else ' <span class="was">not in the lock</span>')
        versions.append(f'<span class="param{" changed" if differs else ""}" '
                        f'data-key="version.{esc(name)}">{esc(name)} '
                        f'<b>{esc(version or "missing")}</b>{note}</span>')
    sections: dict[str, list[str]] = {}
    for key, value, default in params_rows:
        section, name = key.split(".", 1)
        diff = value != default
        was = f' <span class="was">default {esc(fmt(default))}</span>' if diff else ""
        sections.setdefault(section, []).append(
            f'<span class="param{" changed" if diff else ""}" data-key="param.{esc(key)}" '
            f'data-value="{esc(json.dumps(value))}">{esc(name)} <b>{esc(fmt(value))}</b>{was}'
            "</span>")
    params_html = [f"<tr><th>{esc(section)}</th><td>{' '.join(chips)}</td></tr>"
                   for section, chips in sections.items()]
    code_rows = [f"<tr><td><code>{esc(f)}</code></td><td><code>{h[:16]}</code></td></tr>"
                 for f, h in code_files]
    return f"""
<p class="lead">Where this result came from: the exact data, params, code and environment.</p>
<table class="kv">{''.join(ident)}</table>
<h3>Params <span class="muted small">({len(changed)} highlighted: differ from the
default)</span></h3>
<table class="kv params">{''.join(params_html)}</table>
<h3>Environment <span class="muted small">(installed versions; highlighted: not the version
requirements.lock pins)</span></h3>
<p>{' '.join(versions)}</p>
<details><summary>Code: {len(code_files)} files of {esc(CODE_DIR.as_posix())}/</summary>
{table(["file", "sha256 (first 16)"], code_rows, "narrow")}</details>"""


def data_section(out_path: Path) -> str:
    from stages.lib import checks
    from stages.tasks import current

    task = current()
    BLOCKING, WARNINGS, DATASET = checks.blocking(task), checks.warnings(task), checks.dataset(task)

    split = read_json(SPLIT)
    validation = read_json(VALIDATION)
    quarantined = len(read_csv(QUARANTINE))
    splits = [s for s in ("train", "val", "test") if s in split] + sorted(
        s for s in split if s not in ("train", "val", "test"))
    classes = sorted({c for s in splits for c in split[s]}, key=class_key)
    rows = []
    for c in classes:
        cells = "".join(num(f"split.{s}.{c}", split[s].get(c, 0)) for s in splits)
        rows.append(f"<tr><td>{esc(c)}</td>{cells}"
                    f"{num(f'split.total.{c}', sum(split[s].get(c, 0) for s in splits))}</tr>")
    totals = "".join(num(f"split.{s}.total", sum(split[s].values())) for s in splits)
    grand = sum(sum(split[s].values()) for s in splits)
    rows.append(f'<tr class="total"><td>total</td>{totals}{num("split.total", grand)}</tr>')
    checks = validation.get("checks", {})
    kinds = {**{c: "blocking" for c in BLOCKING}, **{c: "warning" for c in WARNINGS},
             **{c: "dataset" for c in DATASET}}
    ordered = sorted(checks.items(), key=lambda kv: (-kv[1], kv[0]))
    check_rows = [f'<tr class="flag"><td>{esc(c)}</td><td class="muted">{esc(kinds.get(c, ""))}'
                  f'</td>{num(f"validation.{c}", n)}</tr>' for c, n in ordered if n]
    passed = " ".join(f'<span class="param" data-key="validation.{esc(c)}" data-value="0">'
                      f"{esc(c)}</span>" for c, n in ordered if not n)
    flagged = sum(1 for n in checks.values() if n)
    link = Path(os.path.relpath(VALIDATION_HTML, out_path.parent or Path("."))).as_posix()
    cards = "".join([
        card("files", "validation.files", validation.get("files", 0), "in the manifest"),
        card("valid", "validation.valid", validation.get("valid", 0), "usable images"),
        card("invalid", "validation.invalid", validation.get("invalid", 0), "blocking problems"),
        card("warned", "validation.warned", validation.get("warned", 0), "used, with a warning"),
        card("quarantined", "quarantine.rows", quarantined, QUARANTINE.as_posix()),
        card("near-duplicate pairs", "validation.near_duplicate_pairs",
             validation.get("near_duplicate_pairs", 0), "kept in one split"),
    ])
    verdict = (f'<span class="badge ok">all {len(checks)} checks passed</span>' if not flagged
               else f'<span class="badge warn">{flagged} of {len(checks)} checks flagged '
               "files</span>")
    return f"""
<p class="lead">{grand:,} images in {len(classes)} classes, split {' / '.join(
        f'{s} {sum(split[s].values()):,}' for s in splits)}.</p>
<div class="cards">{cards}</div>
<div class="grid2">
<div><h3>Class counts per split</h3>
{table(["class", *splits, "total"], rows, "numeric")}</div>
<div><h3>Validation {verdict}</h3>
<p>Every file, every problem: <a href="{esc(link)}">{esc(VALIDATION_HTML.as_posix())}</a>.</p>
{table(["check", "kind", "files"], check_rows, "numeric") if check_rows else ""}
<p class="muted small">Passed (0 files): {passed or "none"}</p></div>
</div>"""


def training_section() -> str:
    curves = read_curves()
    final = read_json(TRAIN)
    figures, last_rows = [], []
    for metric, series in sorted(curves.items()):
        names = " ".join(sorted(series))
        src = png_uri(curve_png(metric, series))
        figures.append(f'<figure data-curve="{esc(metric)}" data-series="{esc(names)}">'
                       f'<img alt="{esc(metric)} per epoch" src="{src}"></figure>')
        for name, points in sorted(series.items()):
            label = name if name == metric else f"{name}/{metric}"
            best = (min if lower_is_better(metric) else max)(p[1] for p in points)
            last_rows.append(f"<tr><td>{esc(label)}</td>{num(f'curve.{label}', points[-1][1])}"
                             f"{num(f'curve_best.{label}', best)}"
                             f"{num(f'curve_steps.{label}', len(points))}</tr>")
    cards = "".join(card(k.replace("_", " "), f"train.{k}", v)
                    for k, v in sorted(flatten(final).items())
                    if isinstance(v, (int, float)) and not isinstance(v, bool))
    return f"""
<p class="lead">Every curve dvclive logged under {esc(CURVES.as_posix())}/, one chart per metric,
train and val together.</p>
<div class="cards">{cards}</div>
<div class="charts">{''.join(figures)}</div>
<h3>Curves: last and best values</h3>
{table(["curve", "last", "best", "points"], last_rows, "numeric narrow")}"""


def evaluation_section() -> str:
    headline = read_json(EVAL)
    per_class = read_json(EVAL_PER_CLASS)
    confusion_rows = read_csv(CONFUSION)
    bad_rows = read_csv(BAD_CASES)
    metrics = {k: v for k, v in sorted(flatten(headline).items())
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    cards = "".join(card(k.replace("_", " "), f"eval.{k}", v,
                         "lower is better" if lower_is_better(k) else "")
                    for k, v in metrics.items())
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
            f"{esc(BAD_CASES.as_posix())}.</p>" if len(bad_rows) > BAD_CASE_ROWS else "")
    sheet = (f'<img class="sheet" alt="misclassified test images" '
             f'src="{png_uri(BAD_CASES_PNG.read_bytes())}">' if BAD_CASES_PNG.is_file()
             else f'<p class="muted">{esc(BAD_CASES_PNG.as_posix())} not found.</p>')
    return f"""
<p class="lead">On the fixed test split: {len(confusion_rows):,} images, {wrong} misclassified.</p>
<div class="cards">{cards}</div>
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


def export_section(onnx: dict) -> str:
    parity = read_json(EXPORT)
    rows = [f"<tr><td>{esc(k)}</td>{num(f'export.{k}', v)}</tr>"
            for k, v in sorted(flatten(parity).items())]
    agree = parity.get("top1_agreement") == 1.0
    verdict = (f'<span class="badge {"ok" if agree else "bad"}">top-1 agreement '
               f'{fmt(parity.get("top1_agreement"))}</span>')
    meta_rows = [f'<tr><td><code>{esc(k)}</code></td><td data-key="onnx.{esc(k)}" '
                 f'data-value="{esc(json.dumps(v))}"><code>{esc(fmt(v))}</code></td></tr>'
                 for k, v in onnx["metadata"].items()]
    facts = [
        f'<tr><th>file</th><td><code>{esc(ONNX.as_posix())}</code></td></tr>',
        f'<tr><th>size</th><td data-key="onnx.bytes" data-value="{onnx["bytes"]}">'
        f'{onnx["bytes"]:,} bytes ({onnx["bytes"] / 1024:,.1f} KiB)</td></tr>',
        f'<tr><th>sha256</th><td><code data-key="onnx.sha256">{onnx["sha256"]}</code></td></tr>',
        f'<tr><th>inputs</th><td><code>{esc("; ".join(onnx["inputs"]))}</code></td></tr>',
        f'<tr><th>outputs</th><td><code>{esc("; ".join(onnx["outputs"]))}</code></td></tr>',
        f'<tr><th>opsets</th><td>{esc(", ".join(onnx["opsets"]))} (IR {onnx["ir_version"]})'
        f'</td></tr>',
        f'<tr><th>producer</th><td>{esc(onnx["producer"])}</td></tr>',
    ]
    return f"""
<p class="lead">PyTorch and onnxruntime on the same test images: largest logit difference
{fmt(parity.get("max_abs_diff"))}; an image fails above atol + rtol &times; its largest logit
({fmt(parity.get("atol"))} + {fmt(parity.get("rtol"))} &times; |logit|). {verdict}</p>
<div class="grid2">
<div><h3>Parity</h3>{table(["number", "value"], rows, "numeric narrow")}</div>
<div><h3>ONNX model</h3><table class="kv">{''.join(facts)}</table>
<h3>Metadata</h3>{table(["key", "value"], meta_rows, "meta")}</div>
</div>"""


# ---------------------------------------------------------------- experiments


def dvc_exp_show() -> list:
    """`dvc exp show --json` of the project in the working directory."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "dvc", "exp", "show", "--json"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise StageError(f"`dvc exp show --json` failed:\n{proc.stderr.strip()}")
    try:
        return json.loads(proc.stdout)
    except ValueError as exc:
        raise StageError(f"`dvc exp show --json` printed no JSON ({exc}):\n{proc.stdout[:500]}") \
            from exc


def experiment_rows(shown: list) -> list[dict]:
    """Flatten `dvc exp show --json`: the workspace, each commit and the experiments on it."""
    def row(entry, kind, parent=""):
        data = entry.get("data") or {}
        params = {}
        for file, content in sorted((data.get("params") or {}).items()):
            prefix = "" if file == PARAMS_FILE else f"{file}:"
            params.update(flatten((content or {}).get("data") or {}, prefix))
        metrics = {}
        for file, content in sorted((data.get("metrics") or {}).items()):
            for k, v in flatten((content or {}).get("data") or {}).items():
                metrics[f"{file}:{k}"] = v
        error = entry.get("error") or data.get("error")
        rev = entry.get("rev") or data.get("rev") or ""
        return {"name": entry.get("name") or (rev if rev == "workspace" else rev[:7]),
                "rev": rev, "kind": kind, "parent": parent,
                "created": data.get("timestamp") or "", "params": params, "metrics": metrics,
                "error": json.dumps(error) if isinstance(error, dict) else (error or "")}

    rows = []
    for commit in shown:
        kind = "workspace" if commit.get("rev") == "workspace" else "commit"
        rows.append(row(commit, kind))
        for group in commit.get("experiments") or []:
            for rev in group.get("revs") or []:
                r = row(rev, "experiment", rows[-1]["name"] if kind == "commit" else "")
                r["name"] = rev.get("name") or group.get("name") or r["name"]
                rows.append(r)
    return rows


def best_marks(rows: list[dict], metrics: list[str]) -> dict[str, set[int]]:
    """{metric: indexes of the rows holding its best value} (ties all marked)."""
    best = {}
    for m in metrics:
        values = [(i, r["metrics"][m]) for i, r in enumerate(rows)
                  if isinstance(r["metrics"].get(m), (int, float))
                  and not isinstance(r["metrics"].get(m), bool)]
        if values:
            target = (min if lower_is_better(m.split(":")[-1]) else max)(v for _, v in values)
            best[m] = {i for i, v in values if v == target}
    return best


def experiments_section(shown: list | None) -> str:
    if shown is None:
        return """
<p class="lead">The experiments table is not part of this page.</p>
<p>This page is a DVC out and must be reproducible from its inputs, but the list of experiments
grows every time one is run. Run <code>python -m stages.report --experiments</code> to write
<code>reports/experiments.html</code>: this page plus the git commit and the table of
<code>dvc exp show --json</code>, with the best value per headline metric marked.</p>"""
    rows = experiment_rows(shown)
    headline = f"{EVAL.as_posix()}:"
    metrics = sorted({m for r in rows for m in r["metrics"]
                      if m.startswith(headline) and m.split(":")[-1] not in NOT_RANKED})
    varying = sorted({k for r in rows for k in r["params"]
                      if len({json.dumps(x["params"].get(k)) for x in rows}) > 1})
    best = best_marks(rows, metrics)
    head = ["experiment", "rev", "created", *varying, *(m[len(headline):] for m in metrics)]
    body = []
    for i, r in enumerate(rows):
        cells = [f'<td class="name">{esc(r["name"])} <span class="muted small">'
                 f'{esc(r["kind"])}</span></td>',
                 f'<td><code>{esc(r["rev"][:7] if r["rev"] != "workspace" else "")}</code></td>',
                 f'<td class="muted">{esc(r["created"])}</td>']
        cells += [f"<td>{esc(fmt(r['params'].get(k)))}</td>" for k in varying]
        for m in metrics:
            v = r["metrics"].get(m)
            is_best = i in best.get(m, set())
            cell = num(f"exp.{r['name']}.{m[len(headline):]}", v, "best" if is_best else "")
            cells.append(cell.replace("</td>", " &#9733;</td>") if is_best else cell)
        if r["error"]:
            cells.append(f'<td class="bad">{esc(r["error"])}</td>')
        body.append(f'<tr class="{esc(r["kind"])}" data-experiment="{esc(r["name"])}">'
                    f"{''.join(cells)}</tr>")
    return f"""
<p class="lead">{len(rows)} rows from <code>dvc exp show --json</code>: the workspace, the
commit and the experiments on it. &#9733; marks the best value of each headline metric
(lowest for {', '.join(LOWER_IS_BETTER)}; highest otherwise). Params columns: those that vary.</p>
<div class="scroll">{table(head, body, "experiments numeric")}</div>"""


# ---------------------------------------------------------------- page

CSS = """
:root{--ink:#1f2937;--muted:#6b7280;--line:#e5e7eb;--bg:#f8fafc;--accent:#2563eb;
--ok:#15803d;--bad:#b91c1c;--warn:#b45309;--hl:#fef3c7}
*{box-sizing:border-box}
body{margin:0;font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
color:var(--ink);background:var(--bg)}
header{background:linear-gradient(135deg,#1e3a8a,#2563eb);color:#fff;padding:28px 40px 20px}
header h1{margin:0 0 4px;font-size:26px}
header .sub{opacity:.85}
header .headline{display:flex;gap:28px;margin-top:16px;flex-wrap:wrap}
header .headline div{font-size:12px;text-transform:uppercase;letter-spacing:.05em;opacity:.85}
header .headline b{display:block;font-size:24px;letter-spacing:0;text-transform:none;opacity:1}
nav{position:sticky;top:0;background:#fff;border-bottom:1px solid var(--line);padding:8px 40px;
z-index:1}
nav a{margin-right:18px;color:var(--accent);text-decoration:none;font-weight:600}
main{max-width:1240px;margin:0 auto;padding:8px 40px 40px}
section{background:#fff;border:1px solid var(--line);border-radius:10px;padding:8px 24px 20px;
margin:20px 0;box-shadow:0 1px 2px rgba(0,0,0,.04)}
h2{font-size:20px;margin:14px 0 4px;color:#1e3a8a}
h3{font-size:15px;margin:18px 0 8px}
.lead{color:var(--muted);margin:2px 0 12px}
.muted{color:var(--muted)}.small{font-size:12px;font-weight:normal}
code{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;overflow-wrap:anywhere}
.param{display:inline-block;margin:2px 4px 2px 0;padding:1px 8px;border-radius:6px;
background:#f1f5f9;font-size:12px}
.param.changed{background:var(--hl);outline:1px solid #f59e0b}
.param .was{color:var(--muted);font-size:11px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:4px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
thead th{background:#f1f5f9;font-weight:600;position:sticky;top:0}
table.numeric td[data-value]{text-align:right;font-variant-numeric:tabular-nums}
table.narrow{width:auto;min-width:50%}
table.kv th{width:140px;color:var(--muted);font-weight:600}
tr.changed td{background:var(--hl)}
tr.flag td{background:#fee2e2}
tr.total td{font-weight:700;border-top:2px solid var(--ink)}
.grid2{display:grid;grid-template-columns:1fr 1fr;gap:28px}
@media (max-width:900px){.grid2{grid-template-columns:1fr}}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:8px 0 4px}
.card{flex:1 1 130px;border:1px solid var(--line);border-radius:8px;padding:10px 12px;
background:#fbfdff}
.card .label{font-size:11px;text-transform:uppercase;letter-spacing:.05em;color:var(--muted)}
.card .value{font-size:22px;font-weight:650;font-variant-numeric:tabular-nums}
.card .note{font-size:11px;color:var(--muted);min-height:14px}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:12px;
margin:12px 0}
.charts figure{margin:0;border:1px solid var(--line);border-radius:8px;padding:4px;
background:#fff}
.charts img{width:100%;height:auto;display:block}
img.sheet{max-width:100%;border:1px solid var(--line);border-radius:8px}
.bar{width:90px;height:8px;background:#e5e7eb;border-radius:4px;overflow:hidden;margin-top:6px}
.bar span{display:block;height:100%;background:var(--accent)}
table.confusion{width:auto}
table.confusion td{width:34px;height:30px;text-align:center;padding:2px;
border:1px solid #fff;font-variant-numeric:tabular-nums}
table.confusion th{text-align:center;background:none;color:var(--muted);padding:2px 6px}
.badge{display:inline-block;font-size:11px;font-weight:600;padding:1px 8px;border-radius:10px;
vertical-align:middle}
.badge.ok{background:#dcfce7;color:var(--ok)}.badge.bad{background:#fee2e2;color:var(--bad)}
.badge.warn{background:#fef3c7;color:var(--warn)}
td.best{background:#dcfce7;font-weight:700}td.bad{color:var(--bad)}
.scroll{overflow-x:auto}
table.experiments td,table.experiments th{white-space:nowrap}
details{margin-top:10px}summary{cursor:pointer;color:var(--accent)}
a{color:var(--accent)}
footer{color:var(--muted);text-align:center;font-size:12px;padding:0 0 30px}
"""


def render(params_path, out_path: Path, git: dict | None = None,
           experiments: list | None = None) -> str:
    """The whole page. git and experiments are given only for the (untracked) human page."""
    onnx = onnx_facts()
    headline = read_json(EVAL)
    parity = read_json(EXPORT)
    split = read_json(SPLIT)
    images = sum(sum(v.values()) for v in split.values())
    sections = {
        "provenance": provenance_section(params_path, onnx, git),
        "data": data_section(out_path),
        "training": training_section(),
        "evaluation": evaluation_section(),
        "export": export_section(onnx),
        "experiments": experiments_section(experiments),
    }
    tops = [("test accuracy", headline.get("accuracy")), ("macro F1", headline.get("f1_macro")),
            ("test images", headline.get("samples")), ("images", images),
            ("ONNX max |diff|", parity.get("max_abs_diff"))]
    head = "".join(f"<div>{esc(label)}<b>{esc(fmt(v))}</b></div>" for label, v in tops
                   if v is not None)
    nav = "".join(f'<a href="#{k}">{esc(SECTION_TITLES[k])}</a>' for k in sections)
    body = "".join(f'<section id="{k}"><h2>{esc(SECTION_TITLES[k])}</h2>{v}</section>\n'
                   for k, v in sections.items())
    classes = onnx["metadata"].get("classes") or []
    title = "Run report" if experiments is None else "Run report with experiments"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<style>{CSS}</style></head>
<body>
<header><h1>{esc(title)}</h1>
<div class="sub">{esc(onnx["metadata"].get("image_size", "?"))}px images,
{len(classes)} classes &middot; data <code>{sha256(MANIFEST)[:12]}</code> &middot; params
<code>{params_sha256(params_path)[:12]}</code> &middot; code <code>{code_hashes()[0][:12]}</code>
</div>
<div class="headline">{head}</div></header>
<nav>{nav}</nav>
<main>
{body}</main>
<footer>Written by <code>python -m stages.report</code> from the run's own outputs; no network
needed to view it.</footer>
</body></html>
"""


@click.command()
@params_option
@click.option("--experiments", "with_experiments", is_flag=True,
              help="Also show the git commit and the table of `dvc exp show --json` (best value "
                   "per headline metric marked). The page then changes with every commit and "
                   "experiment, so it goes to reports/experiments.html (not tracked), never to "
                   "the DVC out reports/run.html.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Where to write the page. Default: reports/run.html, or "
                   "reports/experiments.html with --experiments.")
def main(params_path, with_experiments, out_path):
    """Write the run report: one self-contained HTML page (no network needed to view it).

    Reads the run's outs (data/manifest.csv, data/quarantine.csv, metrics/*.json,
    plots/train/plots/metrics/**.tsv, plots/confusion.csv, plots/bad_cases.{csv,png},
    models/model.onnx), every section of the params file and requirements.lock.
    """
    out = Path(out_path) if out_path else (EXPERIMENTS_OUT if with_experiments else OUT)
    if with_experiments and out.resolve() == OUT.resolve():
        raise StageError(f"--experiments cannot write {OUT}: it is a DVC out and must not change "
                         "when experiments or commits are added. Use --out "
                         f"{EXPERIMENTS_OUT} (the default).")
    git = shown = None
    if with_experiments:
        from stages.lib.provenance import git_state

        git, shown = git_state(), dvc_exp_show()
    page = render(params_path, out, git=git, experiments=shown)
    write_bytes(out, page.encode("utf-8"))
    click.echo(f"report: {out} ({len(page) / 1024:,.0f} KiB)")


if __name__ == "__main__":
    main()
