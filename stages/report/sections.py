"""The report's generic sections: each a short function from the facts to its HTML.

Task-specific sections (for classification: per-class scores, confusion matrix, bad cases) live
with the task, in stages/tasks/<task>/report.py; page.py puts them between these.
"""
import json
import os
from pathlib import Path

from stages.lib.params import PARAMS_FILE
from stages.lib.model.provenance import model_version
from stages.report.facts import (CODE_DIR, CURVES, LOCK, MANIFEST, ONNX, QUARANTINE,
                                 VALIDATION_HTML, Facts, normalise)
from stages.report.summary import SUMMARY
from stages.report.html import (LOWER_IS_BETTER, card, class_key, esc, flatten, fmt,
                                lower_is_better, num, png_uri, table)

# Counts, not scores: shown, never ranked.
NOT_RANKED = ("samples", "epochs", "support", "best_epoch")


def provenance(facts: Facts) -> str:
    changed = [r for r in facts.params_rows if r[1] != r[2]]
    model_meta = facts.onnx["metadata"]
    manifest_sha = facts.manifest_sha256
    # a model.onnx exported before it carried model_version: derived the same way
    release = model_meta.get("model_version") or model_version(model_meta.get("model_sha256")
                                                                or "") or "-"

    def check(expected, actual):
        if not expected:
            return ""
        ok = expected == actual
        return (f' <span class="badge {"ok" if ok else "bad"}">'
                f'{"matches the ONNX metadata" if ok else "differs from the ONNX metadata"}</span>')

    git = facts.git
    if git is None:
        commit = ('<td class="muted">not in this page: it is a DVC out, and a commit made after '
                  'the run cannot be its input. The hashes below name the code, data and params; '
                  '<code>python -m stages.report --experiments</code> writes '
                  '<code>reports/experiments.html</code> with the commit, its registered '
                  'versions and stages and the dataset\'s registered version '
                  '(<code>python -m tools.registry show</code> lists them all).</td>')
    else:
        state = {True: "uncommitted changes", False: "clean", None: "not a git repository"}
        commit = (f'<td><code data-key="git.commit">{esc(git["git_commit"] or "-")}</code> '
                  f'<span class="badge {"bad" if git["git_dirty"] else "ok"}">'
                  f'{esc(state[git["git_dirty"]])}</span></td>')
    ident = [
        f"<tr><th>git commit</th>{commit}</tr>",
        *registry_rows(git),
        f'<tr><th>data version</th><td><code data-key="manifest_sha256">{manifest_sha}</code>'
        f"{check(model_meta.get('manifest_sha256'), manifest_sha)}"
        f'<div class="muted">sha256 of {esc(MANIFEST.as_posix())}: '
        f'{facts.manifest_rows:,} files</div></td></tr>',
        f'<tr><th>params</th><td><code data-key="params_sha256">{facts.params_sha256}'
        f'</code><div class="muted">sha256 over every section of {esc(PARAMS_FILE)}; '
        f"{len(changed)} of {len(facts.params_rows)} values differ from the defaults</div>"
        "</td></tr>",
        f'<tr><th>code</th><td><code data-key="code_sha256">{facts.code_sha256}</code>'
        f'<div class="muted">sha256 over the {len(facts.code_files)} Python files of '
        f"{esc(CODE_DIR.as_posix())}/ (per file below)</div></td></tr>",
        f'<tr><th>model version</th><td><code data-key="model_version">{esc(release)}</code>'
        f'<div class="muted">the version predict\'s rows, serve\'s answers and the ONNX '
        f"metadata carry: the sha256 prefix of models/model.pt</div></td></tr>",
        f'<tr><th>model</th><td><code data-key="model_sha256">'
        f'{esc(model_meta.get("model_sha256", "-"))}</code>'
        f'<div class="muted">sha256 of models/model.pt, as recorded in the ONNX metadata; '
        f'export code <code>{esc(model_meta.get("code_sha256", "-"))}</code></div></td></tr>',
        f'<tr><th>environment</th><td><code data-key="requirements_lock_sha256">'
        f'{facts.lock_sha256}</code><div class="muted">sha256 of {esc(LOCK.as_posix())}'
        "</div></td></tr>",
    ]
    versions = [f'<span class="param" data-key="version.python">python '
                f"<b>{esc(facts.python)}</b></span>"]
    for name, version in facts.installed.items():
        pinned = facts.lock_versions.get(normalise(name), "")
        differs = bool(pinned) and version != pinned
        note = (f' <span class="was">lock pins {esc(pinned)}</span>' if differs
                else "" if pinned else ' <span class="was">not in the lock</span>')
        versions.append(f'<span class="param{" changed" if differs else ""}" '
                        f'data-key="version.{esc(name)}">{esc(name)} '
                        f'<b>{esc(version or "missing")}</b>{note}</span>')
    sections: dict[str, list[str]] = {}
    for key, value, default in facts.params_rows:
        section, name = key.split(".", 1)
        diff = value != default
        was = f' <span class="was">default {esc(fmt(default))}</span>' if diff else ""
        sections.setdefault(section, []).append(
            f'<span class="param{" changed" if diff else ""}" data-key="param.{esc(key)}" '
            f'data-value="{esc(json.dumps(value))}">{esc(name)} <b>{esc(fmt(value))}</b>{was}'
            "</span>")
    params_html = [f"<tr><th>{esc(section)}</th><td>{' '.join(chips)}</td></tr>"
                   for section, chips in sections.items()]
    code_rows = [f"<tr><td><code>{esc(name)}</code></td><td><code>{h[:16]}</code></td></tr>"
                 for name, h in facts.code_files]
    return f"""
<p class="lead">Where this result came from: the exact data, params, code and environment.</p>
<table class="kv">{''.join(ident)}</table>
<h3>Params <span class="muted small">({len(changed)} highlighted: differ from the
default)</span></h3>
<table class="kv params">{''.join(params_html)}</table>
<h3>Environment <span class="muted small">(installed versions; highlighted: not the version
requirements.lock pins)</span></h3>
<p>{' '.join(versions)}</p>
<details><summary>Code: {len(facts.code_files)} files of {esc(CODE_DIR.as_posix())}/</summary>
{table(["file", "sha256 (first 16)"], code_rows, "narrow")}</details>"""


def data(facts: Facts) -> str:
    split, validation = facts.split, facts.validation
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
    found = validation.get("checks", {})
    ordered = sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))
    kinds = {name: kind for name, (kind, _) in facts.checks.items()}
    check_rows = [f'<tr class="flag"><td>{esc(c)}</td><td class="muted">{esc(kinds.get(c, ""))}'
                  f'</td>{num(f"validation.{c}", n)}</tr>' for c, n in ordered if n]
    passed = " ".join(f'<span class="param" data-key="validation.{esc(c)}" data-value="0">'
                      f"{esc(c)}</span>" for c, n in ordered if not n)
    flagged = sum(1 for n in found.values() if n)
    link = Path(os.path.relpath(VALIDATION_HTML, facts.out.parent or Path("."))).as_posix()
    cards = "".join([
        card("files", "validation.files", validation.get("files", 0), "in the manifest"),
        card("valid", "validation.valid", validation.get("valid", 0),
             f"usable {facts.word('items')}"),
        card("invalid", "validation.invalid", validation.get("invalid", 0), "blocking problems"),
        card("warned", "validation.warned", validation.get("warned", 0), "used, with a warning"),
        card("quarantined", "quarantine.rows", facts.quarantined, QUARANTINE.as_posix()),
        card("near-duplicate pairs", "validation.near_duplicate_pairs",
             validation.get("near_duplicate_pairs", 0), "grouped around representatives"),
    ])
    verdict = (f'<span class="badge ok">all {len(found)} checks passed</span>' if not flagged
               else f'<span class="badge warn">{flagged} of {len(found)} checks flagged '
               "files</span>")
    return f"""
<p class="lead">{grand:,} {facts.word("items")} in {len(classes)} classes, split {' / '.join(
        f'{s} {sum(split[s].values()):,}' for s in splits)}.</p>
<div class="cards">{cards}</div>
<div class="grid2">
<div><h3>Class counts per split</h3>
{table(["class", *splits, "total"], rows, "numeric")}</div>
<div><h3>Validation {verdict}</h3>
<p>Every file, every problem: <a href="{esc(link)}">{esc(VALIDATION_HTML.as_posix())}</a>.</p>
{table(["check", "kind", "files"], check_rows, "numeric") if check_rows else ""}
<p class="muted small">Passed (0 files): {passed or "none"}</p></div>
</div>
{split_checks(facts.split_checks or {})}"""


def split_checks(found: dict) -> str:
    """metrics/split.json's balance check (per-class shares off target, with the groups
    responsible) and the leakage between splits (exact and near duplicates, with examples)."""
    if not found:
        return ""
    balance, leakage = found.get("balance", {}), found.get("leakage", {})
    off = balance.get("findings", [])
    if not balance.get("checked"):
        verdict = '<span class="badge">not checked (the split is given or by time)</span>'
    elif off:
        verdict = f'<span class="badge warn">{len(off)} class shares off target</span>'
    else:
        verdict = '<span class="badge ok">every class share within tolerance</span>'
    off_rows = []
    for f in off:
        groups = "; ".join(f"{g['size']} in a group of {g['files']} in {g['split']} "
                           f"(e.g. {g['example']})" for g in f["groups"])
        key = "balance.{}.{}".format(f["class"], f["split"])
        target = "{} ± {}".format(fmt(f["target"]), fmt(f["tolerance"]))
        off_rows.append(f'<tr class="flag"><td>{esc(f["class"])}</td><td>{esc(f["split"])}</td>'
                        f"{num(key, f['share'])}<td>{esc(target)}</td><td>{esc(groups)}</td></tr>")
    leak_rows, examples = [], []
    for pair, o in sorted(leakage.items()):
        flag = ' class="flag"' if o["exact"] or o["near"] else ""
        leak_rows.append(f"<tr{flag}><td>{esc(pair)}</td>{num(f'leakage.{pair}.exact', o['exact'])}"
                         f"{num(f'leakage.{pair}.near', o['near'])}</tr>")
        examples += [f"<li>{esc(pair)}: {esc(e)}</li>" for e in o["examples"]]
    leaked = sum(o["exact"] + o["near"] for o in leakage.values())
    leak_verdict = ('<span class="badge ok">no duplicates across splits</span>' if not leaked
                    else f'<span class="badge warn">{leaked} duplicates across splits</span>')
    off_table = table(["class", "split", "share", "target", "largest groups"], off_rows,
                      "numeric") if off_rows else ""
    leak_table = table(["splits", "exact copies", "near duplicates"], leak_rows, "numeric")
    listed = f'<ul class="small">{"".join(examples)}</ul>' if examples else ""
    return f"""<div class="grid2">
<div><h3>Split balance {verdict}</h3>
<p class="muted small">A class's share of a split may be off its target by at most
split.balance_z ({fmt(balance["z"])}) binomial standard deviations + {fmt(balance["slack"])}.
</p>
{off_table}</div>
<div><h3>Leakage {leak_verdict}</h3>
{leak_table}
{listed}</div>
</div>"""


def training(facts: Facts) -> str:
    from stages.report.charts import curve_png

    figures, last_rows = [], []
    for metric, series in sorted(facts.curves.items()):
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
                    for k, v in sorted(flatten(facts.train).items())
                    if isinstance(v, (int, float)) and not isinstance(v, bool))
    keep = facts.train.get("kept", "last")  # train.keep: which epoch became models/model.pt
    held = (f"the best epoch ({fmt(facts.train.get('best_epoch'))})" if keep == "best"
            else "the last epoch")
    return f"""
<p class="lead">Every curve dvclive logged under {esc(CURVES.as_posix())}/, one chart per metric,
train and val together.</p>
<p>models/model.pt, the model evaluated, exported and served, holds
<b data-key="train.keep" data-value="{esc(json.dumps(keep))}">{esc(held)}</b>
(train.keep: {esc(keep)}).</p>
<div class="cards">{cards}</div>
<div class="charts">{''.join(figures)}</div>
<h3>Curves: last and best values</h3>
{table(["curve", "last", "best", "points"], last_rows, "numeric narrow")}"""


def export(facts: Facts) -> str:
    parity, onnx = facts.export, facts.onnx
    rows = [f"<tr><td>{esc(k)}</td>{num(f'export.{k}', v)}</tr>"
            for k, v in sorted(flatten(parity).items())]
    agree = parity.get("top1_agreement") == 1.0
    largest = (facts.measured or {}).get("max_abs_diff")
    measured = (f"largest logit difference {fmt(largest)} on this machine" if largest is not None
                else f"parity {esc(str(parity.get('parity', '?')))} (the measured differences "
                     "change with the CPU's onnxruntime kernels, so they are in the untracked "
                     "logs/export.json and reports/experiments.html, not in this page)")
    verdict = (f'<span class="badge {"ok" if agree else "bad"}">top-1 agreement '
               f'{fmt(parity.get("top1_agreement"))}</span>')
    labels = dict(facts.meta_labels)  # a stored key in the modality's words
    meta_rows = [f'<tr><td><code>{esc(labels.get(k, k))}</code></td><td data-key="onnx.{esc(k)}" '
                 f'data-value="{esc(json.dumps(v))}"><code>{esc(fmt(v))}</code></td></tr>'
                 for k, v in onnx["metadata"].items()]
    model = [
        f'<tr><th>file</th><td><code>{esc(ONNX.as_posix())}</code></td></tr>',
        f'<tr><th>size</th><td data-key="onnx.bytes" data-value="{onnx["bytes"]}">'
        f'{onnx["bytes"]:,} bytes ({onnx["bytes"] / 1024:,.1f} KiB)</td></tr>',
        f'<tr><th>sha256</th><td><code data-key="onnx.sha256">{onnx["sha256"]}</code></td></tr>',
        f'<tr><th>parameters</th><td data-key="onnx.parameters" '
        f'data-value="{onnx["parameters"]}">{onnx["parameters"]:,}</td></tr>',
        f'<tr><th>multiply-adds</th><td data-key="onnx.macs" data-value="{onnx["macs"]}">'
        + (f'{onnx["macs"]:,} per input (its cost at the input size below)'
           if onnx["macs"] is not None else "depend on the input's width") + '</td></tr>',
        f'<tr><th>inputs</th><td><code>{esc("; ".join(onnx["inputs"]))}</code></td></tr>',
        f'<tr><th>outputs</th><td><code>{esc("; ".join(onnx["outputs"]))}</code></td></tr>',
        f'<tr><th>opsets</th><td>{esc(", ".join(onnx["opsets"]))} (IR {onnx["ir_version"]})'
        f'</td></tr>',
        f'<tr><th>producer</th><td>{esc(onnx["producer"])}</td></tr>',
    ]
    return f"""
<p class="lead">PyTorch and onnxruntime on the same test {facts.word("items")}: {measured};
{"an" if facts.word("item")[0] in "aeiou" else "a"} {facts.word("item")} fails
above atol + rtol &times; its largest logit ({fmt(parity.get("atol"))} +
{fmt(parity.get("rtol"))} &times; |logit|). {verdict}</p>
<div class="grid2">
<div><h3>Parity</h3>{table(["number", "value"], rows, "numeric narrow")}</div>
<div><h3>ONNX model</h3><table class="kv">{''.join(model)}</table>
<h3>Metadata</h3>{table(["key", "value"], meta_rows, "meta")}</div>
</div>"""


# ---------------------------------------------------------------- experiments


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


def experiments(facts: Facts) -> str:
    if facts.experiments is None:
        return """
<p class="lead">The experiments table is not part of this page.</p>
<p>This page is a DVC out and must be reproducible from its inputs, but the list of experiments
grows every time one is run. Run <code>python -m stages.report --experiments</code> to write
<code>reports/experiments.html</code>: this page plus the git commit and the table of
<code>dvc exp show --json</code>, with the best value per headline metric marked.</p>"""
    rows = experiment_rows(facts.experiments)
    headline = f"{SUMMARY.as_posix()}:"  # the one DVC metric file
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


# (id, title, function): before the task's sections, and after them.
BEFORE = [("provenance", "Provenance", provenance), ("data", "Data", data),
          ("training", "Training", training)]
AFTER = [("export", "Export", export), ("experiments", "Experiments", experiments)]


def registry_rows(git: dict | None) -> list[str]:
    """The experiments page's rows of the registry's git facts: the artifacts registered at
    the commit (name, version, active stages; GTO's tags) and data.source's registered version
    (a `dvc import --rev NAME@v2.0.0`). None on run.html: git facts are no DVC out's input."""
    if git is None:
        return []
    found = git.get("registry") or []
    cells = "; ".join(f'<code data-key="registry.{esc(r["artifact"])}">{esc(r["artifact"])} '
                      f'{esc(r["version"])}</code>'
                      + "".join(f' <span class="badge ok">{esc(s)}</span>' for s in r["stages"])
                      for r in found)
    rows = [f"<tr><th>registered</th><td>{cells or 'this commit is no registered version'}"
            f'<div class="muted">GTO\'s tags (python -m tools.registry show)</div></td></tr>']
    data = git.get("dataset") or {}
    if data:
        rows.append(f'<tr><th>dataset</th><td><code data-key="dataset.rev">'
                    f'{esc(data["rev"] or data["commit"][:8])}</code><div class="muted">'
                    f'{esc(data["name"])} imported from {esc(data["url"])} (commit '
                    f'{esc(data["commit"][:8])})</div></td></tr>')
    return rows
