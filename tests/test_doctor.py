"""doctor: each problem is named, with the command that fixes it; FAIL means exit code 1."""
import os
import socket
import subprocess
import sys

from tests.conftest import ROOT
from tools.doctor import FAIL, OK, WARN, lock_findings, read_lock, remote_findings
from tools.project import copy_project, dvc


def test_installed_environment_matches_requirements_lock():
    findings = lock_findings(ROOT / "requirements.lock")
    assert [(f.level, f.message) for f in findings if f.level != OK] == []


def test_run_record_holds_the_lock_files_sha256(in_tmp):
    import hashlib
    import shutil

    from stages.lib.model.provenance import run_record

    shutil.copy(ROOT / "requirements.lock", in_tmp / "requirements.lock")
    digest = hashlib.sha256((ROOT / "requirements.lock").read_bytes()).hexdigest()
    assert run_record("train", {})["requirements_lock_sha256"] == digest


def test_read_lock_normalises_names():
    assert read_lock(ROOT / "requirements.lock")["torch"] == "2.14.1"
    assert "great-expectations" in read_lock(ROOT / "requirements.lock")


def test_missing_package_and_version_mismatch_are_named_with_the_fix(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("click==0.0.1\nno-such-package-xyz==1.2.3\n")
    findings = {f.message.split()[0]: f for f in lock_findings(lock)}
    missing, other = findings["no-such-package-xyz==1.2.3"], findings["click"]
    assert missing.level == FAIL and "not installed" in missing.message
    assert other.level == WARN and "pins 0.0.1" in other.message
    assert missing.fix == other.fix == f"pip install -r {lock}"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3_project(tmp_path, endpoint):
    repo = copy_project(ROOT, tmp_path / "project")
    dvc(repo, "remote", "add", "-d", "s3", "s3://bucket/store")
    dvc(repo, "remote", "modify", "s3", "endpointurl", endpoint)
    return repo


def test_unreachable_remote_names_the_endpoint_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    repo = s3_project(tmp_path, f"http://127.0.0.1:{closed_port()}")
    [finding] = remote_findings(repo, timeout=2)
    assert finding.level == FAIL and "cannot connect" in finding.message
    assert finding.fix.startswith("dvc remote modify s3 endpointurl")


def test_directory_remote_that_does_not_exist(tmp_path):
    repo = copy_project(ROOT, tmp_path / "project")
    dvc(repo, "remote", "add", "-d", "shared", str(tmp_path / "nowhere"))
    [finding] = remote_findings(repo)
    assert finding.level == FAIL and "does not exist" in finding.message
    assert finding.fix.startswith("mkdir -p")
    (tmp_path / "nowhere").mkdir()
    assert [f.level for f in remote_findings(repo)] == [OK]


def test_cli_exits_1_and_prints_each_problem_with_its_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    repo = s3_project(tmp_path, f"http://127.0.0.1:{closed_port()}")
    lock = tmp_path / "other.lock"
    lock.write_text("no-such-package-xyz==1.0\n")
    proc = subprocess.run([sys.executable, "-m", "tools.doctor", "--lock", str(lock),
                           "--timeout", "2"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "FAIL  packages    no-such-package-xyz==1.0 is not installed" in out
    assert f"fix: pip install -r {lock}" in out
    assert "fix: dvc remote modify s3 endpointurl" in out
    assert "git         working tree" in out or "WARN  git" in out
    assert "doctor: 2 blocking problem(s)" in out
