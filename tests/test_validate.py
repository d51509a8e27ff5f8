import csv
import json

import pytest

from stages.ingest import build_manifest, manifest_fields
from stages.lib import checks
from stages.lib.io import write_csv
from stages.lib.params import Validate
from stages.tasks import default_task
from stages.validate import check_all, quarantine_rows, report_html, summarize
from tests.conftest import run_stage, write_image
from tests.corrupt import build

TASK = default_task()
FIELDS = manifest_fields(TASK)


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory):
    root = tmp_path_factory.mktemp("corrupt")
    bad, good = build(root / "raw")
    return root / "raw", bad, good, build_manifest(root / "raw", 2, Validate().max_pixels)


def test_every_bad_file_is_named_with_its_check_and_good_ones_pass(corrupt):
    _, bad, good, rows = corrupt
    result = check_all(rows, Validate(), TASK)
    found = {path: check for check in checks.blocking(TASK)
             for path in result["issues"].get(check, {})}
    assert found == bad  # all offenders, each under the check that catches it
    assert result["bad"] == set(bad) and not result["dataset"]
    assert good == {r["path"] for r in rows} - set(bad)


def test_odd_but_valid_files_are_warnings_not_errors(corrupt):
    _, _, good, rows = corrupt
    issues = check_all(rows, Validate(), TASK)["issues"]
    assert {"cat/deep 16-bit.png", "dog/cmyk.jpg", "bird/palette alpha.png",
            "bird/anim.gif"} <= set(issues["mode"])
    assert set(issues["bit_depth"]) == {"cat/deep 16-bit.png"}
    assert set(issues["transparency"]) == {"bird/palette alpha.png"}
    assert set(issues["animated"]) == {"bird/anim.gif"}
    assert set(issues["extension"]) == {"dog/really a png.jpg"}
    assert set(issues["duplicate"]) == {"cat/cat0.png", "cat/cat0 copy.png"}
    near = issues["near_duplicate"]
    for i, label in enumerate(("cat", "dog", "bird", "cat", "dog", "bird")):
        assert f"{label}/near{i} twin.jpg" in near[f"{label}/near{i}.png"]  # pairs named
    warned = {path for check in checks.warnings(TASK) for path in issues.get(check, {})}
    assert warned <= good


def test_quarantine_lists_every_bad_file_with_a_reason(corrupt):
    _, bad, _, rows = corrupt
    listed = quarantine_rows(check_all(rows, Validate(), TASK), TASK)
    assert [r["path"] for r in listed] == sorted(bad)
    assert all(r["reason"] for r in listed)


def test_class_checks_expected_minimum_and_imbalance(tmp_path):
    for i in range(12):
        write_image(tmp_path / "big" / f"{i}.png", seed=i)
    for i in range(2):
        write_image(tmp_path / "small" / f"{i}.png", seed=100 + i)
    write_image(tmp_path / "stray" / "0.png", seed=200)
    rows = build_manifest(tmp_path, 1)
    p = Validate(min_per_class=3, max_imbalance=5.0, classes=["big", "small", "wanted"])
    result = check_all(rows, p, TASK)
    assert set(result["dataset"]["missing_class"]) == {"wanted"}
    assert set(result["dataset"]["imbalance"]) == {"small"}  # 12 / 2 > 5
    assert set(result["dataset"]["min_per_class"]) == {"small"}
    assert set(result["issues"]["unexpected_class"]) == {"stray/0.png"}
    assert set(result["dataset"]) <= set(checks.dataset(TASK))


def test_check_names_and_kinds_are_declared_once():
    """Every check has one kind and a description, from stages/lib/checks.py (shared) or the
    task's `checks`; metrics/validation_checks.json counts exactly those checks."""
    every = checks.all_checks(TASK)
    assert all(kind in ("blocking", "warning", "dataset") and description
               for kind, description in every.values())
    assert set(every) == set(checks.shared(TASK.modality)) | set(TASK.checks) | {checks.OTHER}
    kinds = checks.blocking(TASK) + checks.warnings(TASK) + checks.dataset(TASK)
    assert sorted(kinds) == sorted(every)  # each check under exactly one kind
    assert set(TASK.annotation_errors) <= set(checks.blocking(TASK))


def test_the_page_names_every_problem_with_the_shared_stylesheet(corrupt):
    """reports/validation.html: every offender under its check with the check's description,
    the run report's stylesheet inline, and no class the stylesheet does not style."""
    import re

    from stages.report.html import stylesheet

    _, bad, _, rows = corrupt
    result = check_all(rows, Validate(), TASK)
    page = report_html(summarize(rows, result, TASK), result, "quarantine", TASK)
    assert "<style>\n" + stylesheet() + "</style>" in page
    assert "<script" not in page and "http" not in page
    for check, issues in result["issues"].items():
        assert f'id="check-{check}"' in page
        assert checks.all_checks(TASK)[check][1] in page
        for path in issues:
            assert path.replace("&", "&amp;") in page
    used = {c for attr in re.findall(r'class="([^"]*)"', page) for c in attr.split()}
    styled = set(re.findall(r"\.([a-zA-Z][\w-]*)", stylesheet()))
    assert {"badge", "bad", "warn", "lead"} <= used <= styled, used - styled


def run_validate(root, rows, on_error):
    """The stage's command in this process (great_expectations is imported once per session)."""
    from click.testing import CliRunner

    from stages.validate import main

    write_csv(root / "data/manifest.csv", rows, FIELDS)
    (root / "params.yaml").write_text(f"validate:\n  on_error: {on_error}\n")
    return CliRunner().invoke(main, [])


def test_fail_names_every_bad_file_and_quarantine_lets_the_rest_through(corrupt, in_tmp):
    _, bad, good, rows = corrupt
    proc = run_validate(in_tmp, rows, "fail")
    assert proc.exit_code == 1 and proc.exception.__class__ is SystemExit
    for path in bad:
        assert path in proc.stderr, path
    assert (in_tmp / "data/quarantine.csv").read_text() == "path,reason\n"
    metrics = json.loads((in_tmp / "metrics/validation.json").read_text())
    assert metrics["invalid"] == len(bad) and metrics["valid"] == len(good)
    counts = json.loads((in_tmp / "metrics/validation_checks.json").read_text())
    assert counts["undecodable"] == 4 and counts["label_conflict"] == 2
    assert "checks" not in metrics  # per-check counts stay out of the headline metrics

    proc = run_validate(in_tmp, rows, "quarantine")
    assert proc.exit_code == 0, proc.output
    with open(in_tmp / "data/quarantine.csv", newline="") as f:
        assert {r["path"] for r in csv.DictReader(f)} == set(bad)
    page = (in_tmp / "reports/validation.html").read_text()
    assert "<script" not in page and "http" not in page  # self-contained
    assert all(path.replace("&", "&amp;") in page for path in bad)
    assert not (in_tmp / "gx").exists() and not (in_tmp / "great_expectations").exists()


def test_clean_data_passes_with_an_empty_quarantine(in_tmp):
    for i in range(6):
        write_image(in_tmp / "imgs" / "a" / f"{i}.png", seed=i)
        write_image(in_tmp / "imgs" / "b" / f"{i}.png", seed=10 + i)
    proc = run_validate(in_tmp, build_manifest(in_tmp / "imgs", 1), "fail")
    assert proc.exit_code == 0, proc.output
    assert (in_tmp / "data/quarantine.csv").read_text() == "path,reason\n"
    metrics = json.loads((in_tmp / "metrics/validation.json").read_text())
    assert metrics["valid"] == 12 and metrics["invalid"] == 0
    counts = json.loads((in_tmp / "metrics/validation_checks.json").read_text())
    assert set(counts) == set(checks.all_checks(TASK))


def test_stage_exits_non_zero_naming_files_from_the_command_line(in_tmp):
    write_image(in_tmp / "imgs" / "a" / "ok.png")
    (in_tmp / "imgs" / "a" / "zero.png").write_bytes(b"")
    write_csv(in_tmp / "data/manifest.csv", build_manifest(in_tmp / "imgs", 1), FIELDS)
    (in_tmp / "params.yaml").write_text("validate:\n  min_per_class: 1\n")
    proc = run_stage("validate", cwd=in_tmp)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "[empty] a/zero.png" in proc.stderr
