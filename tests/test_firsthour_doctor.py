"""Issue 17, item 6: doctor warns when this commit's outs are not on the DVC remote."""
import pytest

from tests.conftest import copy_run, run_tool
from tools.project import dvc

pytestmark = pytest.mark.e2e


def sync_line(proc) -> str:
    [line] = [ln for ln in proc.stdout.splitlines() if "remote sync" in ln]
    return line


def test_doctor_names_outs_missing_from_the_remote_until_pushed(own_data_project, tmp_path):
    run = copy_run(own_data_project, tmp_path / "run")
    dvc(run, "remote", "add", "-d", "shared", str(tmp_path / "store"))
    (tmp_path / "store").mkdir()
    proc = run_tool("doctor", cwd=run)
    line = sync_line(proc)
    assert line.startswith("WARN") and "not on the remote" in line
    assert "data/manifest.csv, data/processed" in line
    assert "fix: dvc push   (this commit; older ones: dvc push --all-commits)" in proc.stdout
    dvc(run, "push")
    assert sync_line(run_tool("doctor", cwd=run)).startswith("OK")
