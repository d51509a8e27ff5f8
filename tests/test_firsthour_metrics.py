"""Issue 17, item 8: the data gate's per-check counts stay out of the headline metrics, so
`dvc exp show` / `dvc metrics show` get no column per check; they are kept, one key per check,
in metrics/validation_checks.json (committed, not a DVC metric), where the report reads them."""
import json

import pytest

from stages.lib import checks
from stages.tasks import get
from tests.conftest import copy_run
from tools.project import dvc

pytestmark = pytest.mark.e2e


def test_per_check_counts_are_kept_but_not_a_headline_metric(trained_project, tmp_path):
    p = copy_run(trained_project, tmp_path / "p")
    names = set(checks.all_checks(get("classification")))
    counts = json.loads((p / "metrics/validation_checks.json").read_text())
    assert set(counts) == names and all(n == 0 for n in counts.values())
    headline = json.loads((p / "metrics/validation.json").read_text())
    assert "checks" not in headline and headline["valid"] == headline["files"] == 200

    shown = json.loads(dvc(p, "metrics", "show", "--json").stdout)
    columns = set()
    for rev in shown.values() if isinstance(shown, dict) else shown:
        for entry in (rev.get("data") or {}).values():
            columns |= set(flatten(entry["data"]))
    assert "metrics/validation_checks.json" not in json.dumps(shown)
    assert columns and not {c for c in columns if c.split(".")[-1] in names}, columns
    assert "accuracy" in columns and "valid" not in columns  # issue 41: metrics/summary.json

    # ... and the file is there on request
    asked = dvc(p, "metrics", "show", "metrics/validation_checks.json").stdout
    assert "undecodable" in asked and "label_conflict" in asked


def flatten(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flatten(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}"
