"""Issue 30, item 8: a full disk or a file-size limit during export and train ends with one
line naming the path and the fix, nothing half-written and no lock left.

RLIMIT_FSIZE stands in for a file-size limit (`ulimit -f`: a write past it fails with EFBIG;
python ignores SIGXFSZ, but the git it runs does not). A real full disk (ENOSPC) is a 16 KiB
tmpfs mounted in a private mount namespace (`unshare -m`, root; `unshare -Urm` otherwise), gone
when the process ends; the test is skipped where neither is allowed.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_stage
from tests.fake_model_project import limit_file_size, make_prepare_project

LIMIT = 8 * 1024  # `ulimit -f 8`


def one_line_error(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    return lines[0]


def stage(name, cwd, env=None, preexec_fn=None, prefix=()):
    return subprocess.run([*prefix, sys.executable, "-m", f"stages.{name}"], cwd=cwd,
                          text=True, capture_output=True, timeout=600, preexec_fn=preexec_fn,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def ours_left(tmpdir: Path) -> list:
    """What export left in TMPDIR besides torch's own caches (torchinductor_<user>)."""
    return [p.name for p in tmpdir.iterdir() if not p.name.startswith("torchinductor")]


@pytest.fixture(scope="module")
def fake_project(tmp_path_factory) -> Path:
    from tests.fake_model_project import make_fake_project

    return make_fake_project(tmp_path_factory.mktemp("disk") / "project")


def test_export_under_a_file_size_limit_is_one_line_naming_tmpdir(fake_project, tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = stage("export", fake_project, env={"TMPDIR": str(tmpdir)},
                 preexec_fn=limit_file_size(LIMIT))
    assert proc.returncode == 1, proc.stderr
    line = one_line_error(proc)
    assert str(tmpdir) in line and "errno 27" in line and "TMPDIR" in line, line
    assert not (fake_project / "models/model.onnx").exists()
    assert ours_left(tmpdir) == []


def small_tmpfs_prefix(mountpoint: Path) -> list:
    """A command prefix that runs the command with a 16 KiB tmpfs on mountpoint (its own mount
    namespace), or [] where this machine does not allow it."""
    script = 'mount -t tmpfs -o size=16k tmpfs "$0" && exec "$@"'
    for unshare in (["unshare", "-m"], ["unshare", "-Urm"]):
        prefix = [*unshare, "sh", "-c", script, str(mountpoint)]
        try:
            probe = subprocess.run([*prefix, "stat", "-f", "-c", "%T", str(mountpoint)],
                                   capture_output=True, text=True, timeout=30)
        except FileNotFoundError:
            return []
        if probe.returncode == 0 and probe.stdout.strip() == "tmpfs":
            return prefix
    return []


def test_export_on_a_full_tmpdir_is_one_line_naming_it(fake_project, tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    prefix = small_tmpfs_prefix(tmpdir)
    if not prefix:
        pytest.skip("no private tmpfs mount here (needs root or user namespaces)")
    proc = stage("export", fake_project, env={"TMPDIR": str(tmpdir)}, prefix=prefix)
    assert proc.returncode == 1, proc.stderr
    line = one_line_error(proc)
    assert str(tmpdir) in line and "errno 28" in line and "No space left" in line, line
    assert "TMPDIR" in line, line
    assert not (fake_project / "models/model.onnx").exists()


def git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_train_under_a_file_size_limit_is_one_line_and_leaves_no_git_lock(tmp_path):
    """dvclive opens the DVC repository, whose SQLite state database cannot grow past the
    limit (a bare `sqlite3.OperationalError: disk I/O error` before); the run record's
    `git status` refreshed an index larger than the limit, was killed by SIGXFSZ and left
    .git/index.lock behind, which blocks every later git command."""
    root = make_prepare_project(tmp_path / "project")
    for i in range(300):  # a git index well past 8 KiB, as in any real project
        (root / f"notes/note_with_a_rather_long_name_{i:03d}.txt").parent.mkdir(exist_ok=True)
        (root / f"notes/note_with_a_rather_long_name_{i:03d}.txt").write_text(f"{i}\n")
    git(root, "init", "-q")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "project")
    proc = subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    site = tmp_path / "dvc-site"  # DVC's state database: here, not in /var/tmp/dvc
    proc = subprocess.run([sys.executable, "-m", "dvc", "config", "core.site_cache_dir",
                           str(site)], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (root / ".git/index").stat().st_size > 2 * LIMIT
    proc = run_stage("prepare", cwd=root)
    assert proc.returncode == 0, proc.stderr
    later = os.stat(root / "notes").st_mtime + 10
    for note in (root / "notes").iterdir():  # stat changes: `git status` refreshes the index
        os.utime(note, (later, later))
    model = (root / "models/model.pt").read_bytes()
    proc = stage("train", root, preexec_fn=limit_file_size(LIMIT))
    assert proc.returncode == 1, proc.stderr
    assert not (root / ".git/index.lock").exists(), proc.stderr
    line = one_line_error(proc)
    assert str(site) in line and "core.site_cache_dir" in line, line
    assert (root / "models/model.pt").read_bytes() == model  # nothing half-written
    assert not list(root.glob("models/**/.*.tmp"))
