"""The data gate: stop the pipeline before training when any file is unusable, naming each one.

The manifest (plus the per-image facts ingest gathered) is checked with great_expectations, one
expectation per check, each returning every offender; nothing fails until all checks have run.
Blocking problems either stop the pipeline (`validate.on_error: fail`) or are listed in
data/quarantine.csv and left out of the split (`quarantine`); warnings (odd modes that the
shared conversion handles, duplicates kept together, near-duplicate pairs) never block.
Outputs: metrics/validation.json (counts per check, for `dvc metrics diff`), the quarantine
list (header only when empty) and reports/validation.html (self-contained).
"""
from collections import Counter, defaultdict
from pathlib import Path

import click

from stages.lib import checks as declared
from stages.lib.io import StageError, read_csv, write_bytes, write_csv, write_json
from stages.lib.params import load, params_option

MANIFEST = Path("data/manifest.csv")
METRICS = Path("metrics/validation.json")
QUARANTINE = Path("data/quarantine.csv")
REPORT = Path("reports/validation.html")

# The first words of ingest's `error` column name the check that blocks the file.
INGEST_ERRORS = {"empty file": "empty", "cannot decode": "undecodable", "too large": "too_large",
                 "symlink escapes data.source": "symlink", "broken symlink": "symlink",
                 "symlinked folder": "symlink", "empty class folder": "empty_folder",
                 "unlabelled": "unlabelled", "missing": "missing"}
BLOCKING, WARNINGS, DATASET = declared.blocking(), declared.warnings(), declared.dataset()
EXTENSIONS = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".gif": "GIF", ".bmp": "BMP",
              ".tif": "TIFF", ".tiff": "TIFF", ".webp": "WEBP", ".pgm": "PPM", ".ppm": "PPM",
              ".pbm": "PPM"}


def error_check(error: str) -> str | None:
    if not error:
        return None
    return next((c for prefix, c in INGEST_ERRORS.items() if error.startswith(prefix)), "error")


def file_frame(rows, p):
    """One row per manifest row; a column is None where its check does not apply."""
    import pandas as pd

    def num(v):
        return int(v) if str(v).strip() else 0

    ok = [not r["error"] for r in rows]
    labels_of = defaultdict(set)
    for r, good in zip(rows, ok, strict=True):
        if good:
            labels_of[r["sha256"]].add(r["label"])
    copies = Counter(r["sha256"] for r, good in zip(rows, ok, strict=True) if good)
    conflict = [good and len(labels_of[r["sha256"]]) > 1 for r, good in zip(rows, ok, strict=True)]
    return pd.DataFrame({
        "path": [r["path"] for r in rows],
        "ingest_error": [error_check(r["error"]) for r in rows],
        "format": [r["format"] if g else None for r, g in zip(rows, ok, strict=True)],
        "min_side": [min(num(r["width"]), num(r["height"])) if g else None
                     for r, g in zip(rows, ok, strict=True)],
        "pixels": [num(r["width"]) * num(r["height"]) if r["width"] else None for r in rows],
        "labels_per_content": [len(labels_of[r["sha256"]]) if g else None
                               for r, g in zip(rows, ok, strict=True)],
        "content": [r["sha256"] if g and not c and copies[r["sha256"]] > 1 else None
                    for r, g, c in zip(rows, ok, conflict, strict=True)],
        "mode": [r["mode"] if g else None for r, g in zip(rows, ok, strict=True)],
        "bits": [num(r["bits"]) if g else None for r, g in zip(rows, ok, strict=True)],
        "alpha": [num(r["alpha"]) if g else None for r, g in zip(rows, ok, strict=True)],
        "frames": [num(r["frames"]) if g else None for r, g in zip(rows, ok, strict=True)],
        "ext_format": [EXTENSIONS.get(Path(r["path"]).suffix.lower()) if g else None
                       for r, g in zip(rows, ok, strict=True)],
        "label": [r["label"] if g and r["label"] else None for r, g in zip(rows, ok, strict=True)],
    })


def file_suite(p):
    """(check, expectation) pairs over file_frame's columns."""
    import great_expectations as gx

    e = gx.expectations
    suite = [(kind, e.ExpectColumnValuesToNotBeInSet(column="ingest_error", value_set=[kind]))
             for kind in sorted(set(INGEST_ERRORS.values()) - {"too_large"}) + ["error"]]
    suite += [
        ("format", e.ExpectColumnValuesToBeInSet(column="format", value_set=p.formats)),
        ("too_small", e.ExpectColumnValuesToBeBetween(column="min_side", min_value=p.min_side)),
        ("too_large", e.ExpectColumnValuesToBeBetween(column="pixels", max_value=p.max_pixels)),
        ("label_conflict", e.ExpectColumnValuesToBeBetween(column="labels_per_content",
                                                           max_value=1)),
        ("duplicate", e.ExpectColumnValuesToBeUnique(column="content")),
        ("mode", e.ExpectColumnValuesToBeInSet(column="mode", value_set=["L", "RGB"])),
        ("bit_depth", e.ExpectColumnValuesToBeBetween(column="bits", max_value=8)),
        ("transparency", e.ExpectColumnValuesToBeInSet(column="alpha", value_set=[0])),
        ("animated", e.ExpectColumnValuesToBeBetween(column="frames", max_value=1)),
        ("extension", e.ExpectColumnPairValuesToBeEqual(
            column_A="ext_format", column_B="format", ignore_row_if="either_value_is_missing")),
    ]
    if p.classes:
        suite.append(("unexpected_class", e.ExpectColumnValuesToBeInSet(
            column="label", value_set=p.classes)))
    return suite


def class_suite(p):
    import great_expectations as gx

    e = gx.expectations
    return [("min_per_class", e.ExpectColumnValuesToBeBetween(column="count",
                                                              min_value=p.min_per_class)),
            ("imbalance", e.ExpectColumnValuesToBeBetween(column="imbalance",
                                                          max_value=p.max_imbalance))]


def offenders(df, suite, key: str) -> dict[str, list]:
    """{check: sorted values of `key` in the rows failing it}, via one great_expectations run."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")  # no gx/ folder, no network
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = (ctx.data_sources.add_pandas("gate").add_dataframe_asset("rows")
             .add_batch_definition_whole_dataframe("all")
             .get_batch(batch_parameters={"dataframe": df}))
    gx_suite = gx.ExpectationSuite(name="gate")
    for check, expectation in suite:
        expectation.meta = {"check": check}
        gx_suite.add_expectation(expectation)
    result = batch.validate(gx_suite, result_format={
        "result_format": "COMPLETE", "unexpected_index_column_names": [key]})
    found = {check: [] for check, _ in suite}
    for r in result.results:  # not in suite order
        found[r.expectation_config.meta["check"]] = sorted(
            {row[key] for row in r.result.get("unexpected_index_list") or []})
    return found


def reason(check: str, row: dict, p, extra: dict) -> str:
    w, h = row["width"], row["height"]
    return {
        "format": f"unsupported format {row['format']} (validate.formats: {', '.join(p.formats)})",
        "too_small": f"too small: {w}x{h} (validate.min_side is {p.min_side})",
        "too_large": row["error"] or f"too large: {w}x{h} > validate.max_pixels ({p.max_pixels})",
        "label_conflict": "label conflict: the same content is labelled "
                          + " and ".join(sorted(extra["labels_of"][row["sha256"]]))
                          + " (" + ", ".join(extra["paths_of"][row["sha256"]]) + ")",
        "unexpected_class": f"unexpected class {row['label']} (validate.classes)",
        "duplicate": "exact duplicate of " + ", ".join(
            q for q in extra["paths_of"][row["sha256"]] if q != row["path"])
            + " (kept in one split)",
        "near_duplicate": "near-duplicate of " + ", ".join(extra["near"].get(row["path"], []))
                          + " (kept in one split)",
        "mode": f"mode {row['mode']}: converted to grey/RGB by the shared preprocessing",
        "bit_depth": f"{row['bits']}-bit pixels: scaled to 8 bits by the shared preprocessing",
        "transparency": "transparency: composited onto black by the shared preprocessing",
        "animated": f"animated ({row['frames']} frames): the first frame is used",
        "extension": f"extension {Path(row['path']).suffix} but {row['format']} content "
                     f"(decoded by content)",
    }.get(check, row["error"])


def check_all(rows, p) -> dict:
    """Every problem, warning and class-level failure; nothing raises here."""
    import pandas as pd

    from stages.lib.groups import near_duplicate_pairs

    by_path = {r["path"]: r for r in rows}
    found = offenders(file_frame(rows, p), file_suite(p), "path")
    pairs = near_duplicate_pairs(rows, p.near_dup_distance)
    near = defaultdict(list)
    for a, b, d in pairs:
        near[a].append(f"{b} (distance {d})")
        near[b].append(f"{a} (distance {d})")
    found["near_duplicate"] = sorted(near)
    extra = {"near": near, "labels_of": defaultdict(set), "paths_of": defaultdict(list)}
    for r in rows:
        if not r["error"]:
            extra["labels_of"][r["sha256"]].add(r["label"])
            extra["paths_of"][r["sha256"]].append(r["path"])
    issues = {check: {path: reason(check, by_path[path], p, extra) for path in found[check]}
              for check in BLOCKING + WARNINGS if found.get(check)}
    bad = {path for c in BLOCKING for path in issues.get(c, {})}
    per_class = Counter(r["label"] for r in rows if r["path"] not in bad)
    dataset = {}
    if per_class:
        largest = max(per_class.values())
        classes = pd.DataFrame({"label": sorted(per_class),
                                "count": [per_class[c] for c in sorted(per_class)],
                                "imbalance": [largest / per_class[c] for c in sorted(per_class)]})
        for check, names in offenders(classes, class_suite(p), "label").items():
            if names:
                dataset[check] = {c: (f"class {c} has {per_class[c]} usable images "
                                      f"(validate.min_per_class is {p.min_per_class})"
                                      if check == "min_per_class" else
                                      f"class {c} has {per_class[c]} images, {largest} in the "
                                      f"largest: ratio {largest / per_class[c]:.1f} > "
                                      f"validate.max_imbalance ({p.max_imbalance})")
                                  for c in names}
    missing = sorted(set(p.classes) - set(per_class))
    if missing:
        dataset["missing_class"] = {c: f"expected class {c} has no usable images" for c in missing}
    return {"issues": issues, "bad": bad, "dataset": dataset, "per_class": per_class,
            "pairs": pairs}


def summarize(rows, result) -> dict:
    counts = {c: len(result["issues"].get(c, {})) for c in BLOCKING + WARNINGS}
    counts.update({c: len(result["dataset"].get(c, {})) for c in DATASET})
    warned = {path for c in WARNINGS for path in result["issues"].get(c, {})}
    return {
        "files": len(rows),
        "valid": len(rows) - len(result["bad"]),
        "invalid": len(result["bad"]),
        "warned": len(warned - result["bad"]),
        "near_duplicate_pairs": len(result["pairs"]),
        "classes": len(result["per_class"]),
        "per_class": dict(sorted(result["per_class"].items())),
        "checks": counts,
    }


def quarantine_rows(result) -> list[dict]:
    reasons = defaultdict(list)
    for check in BLOCKING:
        for path, why in result["issues"].get(check, {}).items():
            reasons[path].append(why)
    return [{"path": path, "reason": "; ".join(reasons[path])} for path in sorted(reasons)]


def report_html(summary, result, policy) -> str:
    """A self-contained page: no scripts, no external links, the shared stylesheet inline."""
    from stages.report.validation import page

    return page(summary, result, policy)


def failure_message(result, total: int, policy: str) -> str:
    lines = []
    for issues, checks in ((result["dataset"], DATASET), (result["issues"], BLOCKING)):
        for check in checks:
            for key, why in sorted(issues.get(check, {}).items()):
                lines.append(f"  [{check}] {key}: {why}")
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

    Reads the `validate` section (min_side, max_pixels, formats, classes, min_per_class,
    max_imbalance, near_dup_distance, on_error) from the params file. Writes
    metrics/validation.json, data/quarantine.csv and reports/validation.html.
    """
    p = load("validate", params_path)
    if p.on_error not in ("fail", "quarantine"):
        raise StageError(f"validate.on_error must be fail or quarantine, got {p.on_error!r}.")
    rows = read_csv(MANIFEST)
    result = check_all(rows, p)
    summary = summarize(rows, result)
    write_json(METRICS, summary)
    write_bytes(REPORT, report_html(summary, result, p.on_error).encode())
    quarantined = quarantine_rows(result) if p.on_error == "quarantine" else []
    write_csv(QUARANTINE, quarantined, ["path", "reason"])
    for check in WARNINGS:
        if result["issues"].get(check):
            click.echo(f"validate: warning: {len(result['issues'][check])} files: {check}")
    if result["dataset"] or (result["bad"] and p.on_error == "fail"):
        raise StageError(failure_message(result, len(rows), p.on_error))
    click.echo(f"validate: {summary['valid']} of {len(rows)} files usable"
               + (f", {len(quarantined)} quarantined -> {QUARANTINE}" if quarantined else ""))


if __name__ == "__main__":
    main()
