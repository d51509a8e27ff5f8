"""The data gate: stop the pipeline before training when any file is unusable, naming each one.

The manifest (plus the per-file facts ingest gathered) is checked with great_expectations, one
expectation per check, each returning every offender; nothing fails until all checks have run.
The checks of what a file holds (images: format, size, mode...) are the task's modality's
(Task.modality: check_columns, expectations, reason); the rest are the same for every input.
Blocking problems either stop the pipeline (`validate.on_error: fail`) or are listed in
data/quarantine.csv and left out of the split (`quarantine`); warnings (odd modes that the
shared conversion handles, duplicates kept together, near-duplicate pairs) never block.
Outputs: metrics/validation.json (the headline counts, committed but not a DVC metric: the
report's metrics/summary.json is), metrics/validation_checks.json (the count of every
check, one key each: a plain out, so `dvc exp show` does not grow a column per check;
`dvc metrics show` names it as a target), the quarantine list (header only when empty) and
reports/validation.html (self-contained).
"""
from collections import Counter, defaultdict
from pathlib import Path

import click

from stages.lib.data import changes
from stages.lib import checks, show
from stages.lib.io import StageError, read_csv, write_bytes, write_csv, write_json
from stages.lib.params import params_option

MANIFEST = Path("data/manifest.csv")
METRICS = Path("metrics/validation.json")
CHECK_COUNTS = Path("metrics/validation_checks.json")  # {check: count}, not a DVC metric
QUARANTINE = Path("data/quarantine.csv")
REPORT = Path("reports/validation.html")


def error_kinds(task) -> list[str]:
    """The manifest's error kinds that validate checks by name, sorted."""
    return sorted(set(checks.ingest_errors(task.modality)) | set(task.annotation_errors))


def error_check(row: dict, task) -> str | None:
    """The check that blocks a row with an ingest error: its error_kind, or the catch-all."""
    if not row["error"]:
        return None
    return row["error_kind"] if row["error_kind"] in error_kinds(task) else checks.OTHER


def file_frame(rows, p, task, settings):
    """One row per manifest row; a column is None where its check does not apply."""
    import pandas as pd

    ok = [not r["error"] for r in rows]
    keys = [task.annotation_key(r) for r in rows]
    labels_of = defaultdict(set)
    for r, key, good in zip(rows, keys, ok, strict=True):
        if good:
            labels_of[r["sha256"]].add(key)
    copies = Counter(r["sha256"] for r, good in zip(rows, ok, strict=True) if good)
    conflict = [good and len(labels_of[r["sha256"]]) > 1 for r, good in zip(rows, ok, strict=True)]
    columns, findings = task.check_columns(rows, ok, p, settings)
    return pd.DataFrame({
        "path": [r["path"] for r in rows],
        "ingest_error": [error_check(r, task) for r in rows],
        **task.modality.check_columns(rows, ok, p),
        "labels_per_content": [len(labels_of[r["sha256"]]) if g else None
                               for r, g in zip(rows, ok, strict=True)],
        "content": [r["sha256"] if g and not c and copies[r["sha256"]] > 1 else None
                    for r, g, c in zip(rows, ok, conflict, strict=True)],
        **columns,
    }), labels_of, findings


def file_suite(p, task):
    """(check, expectation) pairs over file_frame's columns. An error kind the modality checks
    from its own columns (images: too_large, from the pixel count) is not checked twice."""
    import great_expectations as gx

    e = gx.expectations
    own = task.modality.expectations(p)
    covered = {check for check, _ in own}
    suite = [(kind, e.ExpectColumnValuesToNotBeInSet(column="ingest_error", value_set=[kind]))
             for kind in [k for k in error_kinds(task) if k not in covered] + [checks.OTHER]]
    suite += [
        ("label_conflict", e.ExpectColumnValuesToBeBetween(column="labels_per_content",
                                                           max_value=1)),
        ("duplicate", e.ExpectColumnValuesToBeUnique(column="content")),
    ]
    return suite + own + task.file_expectations(p)


def reason(check: str, row: dict, p, extra: dict, task) -> str:
    if check in task.checks:
        return task.reason(check, row, p, extra["findings"], extra["settings"])
    own = task.modality.reason(check, row, p)
    if own is not None:
        return own
    return {
        "label_conflict": "label conflict: the same content is labelled "
                          + " and ".join(sorted(extra["labels_of"][row["sha256"]]))
                          + " (" + ", ".join(extra["paths_of"][row["sha256"]]) + ")",
        "duplicate": "exact duplicate of " + ", ".join(
            q for q in extra["paths_of"][row["sha256"]] if q != row["path"])
            + " (kept in one split)",
        "near_duplicate": "near-duplicate of " + ", ".join(extra["near"].get(row["path"], []))
                          + " (grouped with its nearest representative)",
    }.get(check, row["error"])


def check_all(rows, p, task, settings: dict | None = None) -> dict:
    """Every problem, warning and dataset-level failure; nothing raises here. settings: the
    task's check_settings (of the default params when not given)."""
    from stages.lib.data.groups import near_duplicate_pairs

    if settings is None:
        from stages.lib.params import defaults

        settings = task.check_settings(defaults())
    by_path = {r["path"]: r for r in rows}
    frame, labels_of, findings = file_frame(rows, p, task, settings)
    found = checks.offenders(frame, file_suite(p, task), "path")
    pairs = near_duplicate_pairs(rows, p.near_dup_distance, task.modality.fingerprint)
    near = defaultdict(list)
    for a, b, d in pairs:
        near[a].append(f"{b} (distance {d})")
        near[b].append(f"{a} (distance {d})")
    found["near_duplicate"] = sorted(near)
    extra = {"near": near, "labels_of": labels_of, "paths_of": defaultdict(list),
             "findings": findings, "settings": settings}
    for r in rows:
        if not r["error"]:
            extra["paths_of"][r["sha256"]].append(r["path"])
    per_file = checks.blocking(task) + checks.warnings(task)
    issues = {check: {path: reason(check, by_path[path], p, extra, task)
                      for path in found[check]}
              for check in per_file if found.get(check)}
    bad = {path for c in checks.blocking(task) for path in issues.get(c, {})}
    usable = [r for r in rows if r["path"] not in bad]
    dataset = task.dataset_findings(usable, p, checks.offenders)
    return {"issues": issues, "bad": bad, "dataset": dataset,
            "per_class": task.label_counts(usable), "pairs": pairs,
            "task_metrics": task.dataset_metrics(usable)}


def summarize(rows, result, task) -> dict:
    counts = {c: len(result["issues"].get(c, {}))
              for c in checks.blocking(task) + checks.warnings(task)}
    counts.update({c: len(result["dataset"].get(c, {})) for c in checks.dataset(task)})
    warned = {path for c in checks.warnings(task) for path in result["issues"].get(c, {})}
    return {
        "files": len(rows),
        "valid": len(rows) - len(result["bad"]),
        "invalid": len(result["bad"]),
        "warned": len(warned - result["bad"]),
        "near_duplicate_pairs": len(result["pairs"]),
        "classes": len(result["per_class"]),
        "per_class": dict(sorted(result["per_class"].items())),
        "checks": counts,
        **result.get("task_metrics", {}),
    }


def quarantine_rows(result, task) -> list[dict]:
    reasons = defaultdict(list)
    for check in checks.blocking(task):
        for path, why in result["issues"].get(check, {}).items():
            reasons[path].append(why)
    return [{"path": path, "reason": "; ".join(reasons[path])} for path in sorted(reasons)]


def report_html(summary, result, policy, task) -> str:
    """reports/validation.html: a self-contained page (stages/report/validation.py)."""
    from stages.report.validation import page

    return page(summary, result, policy, checks.all_checks(task), task.modality.WORDS["items"])


def failure_message(result, total: int, policy: str, task) -> str:
    lines = []
    for issues, names in ((result["dataset"], checks.dataset(task)),
                          (result["issues"], checks.blocking(task))):
        for check in names:
            for key, why in sorted(issues.get(check, {}).items()):
                lines.append(f"  [{check}] {show.text(key)}: {show.text(why)}")
    how = ("Quarantine cannot fix class-level problems: add images or change the validate "
           "params named above." if policy == "quarantine" else
           "Fix or remove these files under data.source, or set validate.on_error: quarantine "
           "to leave them out (listed in data/quarantine.csv).")
    return (f"validate: {len(result['bad'])} of {total} files cannot be used"
            f"{' and the classes fail' if result['dataset'] else ''} "
            f"(see {REPORT}):\n" + "\n".join(lines) + f"\n{how}")


@click.command()
@params_option
def main(params_path):
    """Check data/manifest.csv and stop, naming every bad file, before any training.

    Reads `task` and the `validate` section (min_side, max_pixels, formats, classes,
    min_per_class, max_imbalance, near_dup_distance, on_error) from the params file. Writes
    metrics/validation.json, metrics/validation_checks.json, data/quarantine.csv and
    reports/validation.html.
    """
    from stages.tasks import open_stage

    task, params, _ = open_stage("validate", params_path)  # first: params that do not fit stop
    p = params["validate"]
    rows = read_csv(MANIFEST)
    for line in changes.report("validate", changes.previous("validate", "deps"), rows):
        click.echo(show.text(line))  # what changed since the last validated manifest
    result = check_all(rows, p, task, task.check_settings(params))
    summary = summarize(rows, result, task)
    write_json(METRICS, {k: v for k, v in summary.items() if k != "checks"})
    write_json(CHECK_COUNTS, summary["checks"])
    write_bytes(REPORT, report_html(summary, result, p.on_error, task).encode())
    quarantined = quarantine_rows(result, task) if p.on_error == "quarantine" else []
    write_csv(QUARANTINE, quarantined, ["path", "reason"])
    for check in checks.warnings(task):
        if result["issues"].get(check):
            found = result["issues"][check]
            click.echo(f"validate: warning: {len(found)} files: {check}: {show.some(found)} "
                       f"(every one in {REPORT})")
    if result["dataset"] or (result["bad"] and p.on_error == "fail"):
        raise StageError(failure_message(result, len(rows), p.on_error, task))
    click.echo(f"validate: {summary['valid']} of {len(rows)} files usable"
               + (f", {len(quarantined)} quarantined -> {QUARANTINE}" if quarantined else ""))


if __name__ == "__main__":
    main()
