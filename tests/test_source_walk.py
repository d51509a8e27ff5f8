"""Issue 30, item 9: `tools.doctor` names every entry under data.source that DVC's own walk
trips on before ingest runs (symlink loops, symlinks to nothing, unreadable folders and files,
FIFOs, sockets, hidden ones included), one FAIL line per kind with the paths and the fix, and
never DVC's "Having any troubles?" banner.

The unreadable cases run doctor with root's CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped
(`setpriv`), so mode 000 is unreadable as it is to any other user; the test checks that first.
"""
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, write_image
from tests.test_hardening import NO_DAC, can_drop_dac, make_special
from tools.doctor import FAIL, OK, source_findings


def fails(findings) -> str:
    assert findings and all(f.level == FAIL for f in findings), findings
    return "\n".join(f"{f.message} fix: {f.fix}" for f in findings)


def test_doctor_names_symlink_loops_dangling_links_and_hidden_fifos(tmp_path):
    (tmp_path / "params.yaml").write_text("data:\n  source: src\n")
    write_image(tmp_path / "src/cat/a.png")
    assert [f.level for f in source_findings(tmp_path)] == [OK]
    (tmp_path / "src/cat/loop.png").symlink_to("loop.png")
    (tmp_path / "src/cat/x.png").symlink_to("y.png")
    (tmp_path / "src/cat/y.png").symlink_to("x.png")
    (tmp_path / "src/cat/gone.png").symlink_to("nowhere.png")
    (tmp_path / "src/cat/up").symlink_to("..", target_is_directory=True)  # DVC: fine
    make_special(tmp_path / "src/.cache")  # hidden: ingest skips it, DVC does not
    text = fails(source_findings(tmp_path))
    loops = next(line for line in text.splitlines() if "symlink loop" in line)
    assert all(p in loops for p in ("src/cat/loop.png", "src/cat/x.png", "src/cat/y.png"))
    assert "Errno 40" in loops and ".dvcignore" in loops
    dangling = next(line for line in text.splitlines() if "to nothing" in line)
    assert "src/cat/gone.png" in dangling and "Errno 2" in dangling
    assert "src/.cache/pipe.png" in text and "src/.cache/sock.png" in text
    assert "src/cat/up" not in text and "src/cat/a.png" not in text
    (tmp_path / ".dvcignore").write_text("src/cat/loop.png\nsrc/cat/x.png\nsrc/cat/y.png\n"
                                         "src/cat/gone.png\nsrc/.cache/\n")
    assert [f.level for f in source_findings(tmp_path)] == [OK]


def test_dvc_stops_on_a_symlink_to_nothing_and_its_dvcignore_entry_clears_it(tmp_path):
    """What the doctor's dangling-link line claims: `dvc repro` stops on it before the stage
    runs ([Errno 2]), and runs once .dvcignore lists it."""
    from tools.project import dvc, git

    git(tmp_path, "init", "-q")
    dvc(tmp_path, "init", "-q")
    (tmp_path / "src").mkdir()
    (tmp_path / "src/a.txt").write_text("a\n")
    (tmp_path / "src/gone.png").symlink_to("nowhere.png")
    (tmp_path / "dvc.yaml").write_text("stages:\n  s:\n    cmd: ls src > out.txt\n"
                                       "    deps: [src]\n    outs: [out.txt]\n")
    repro = [sys.executable, "-m", "dvc", "repro"]
    proc = subprocess.run(repro, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "[Errno 2]" in proc.stderr, proc.stderr
    assert not (tmp_path / "out.txt").exists()
    (tmp_path / ".dvcignore").write_text("src/gone.png\n")
    proc = subprocess.run(repro, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not can_drop_dac(), reason="needs setpriv to drop root's DAC override")
def test_doctor_as_a_user_names_unreadable_folders_and_files_without_dvcs_banner(tmp_path):
    from tools.project import dvc, git

    (tmp_path / "params.yaml").write_text("data:\n  source: src\n")
    write_image(tmp_path / "src/cat/a.png")
    write_image(tmp_path / "src/locked/b.png")
    secret = write_image(tmp_path / "src/cat/secret.png")
    git(tmp_path, "init", "-q")
    dvc(tmp_path, "init", "-q")
    (tmp_path / "src/locked").chmod(0)
    secret.chmod(0)
    prefix = NO_DAC if os.geteuid() == 0 else []
    try:  # the case is real: this user cannot list the folder nor read the file
        assert subprocess.run([*prefix, "ls", str(tmp_path / "src/locked")],
                              capture_output=True).returncode != 0
        assert subprocess.run([*prefix, "cat", str(secret)], capture_output=True).returncode != 0
        proc = subprocess.run([*prefix, sys.executable, "-m", "tools.doctor", "--lock",
                               str(ROOT / "requirements.lock")], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        (tmp_path / "src/locked").chmod(0o755)
        secret.chmod(0o644)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Having any troubles" not in out and "Traceback" not in out, out
    source = [line for line in out.splitlines() if line.startswith("FAIL  source")]
    assert any("src/locked" in line and "cannot list" in line for line in source), out
    assert any("src/cat/secret.png" in line and "cannot read" in line for line in source), out
    assert out.count("chmod") >= 2, out


def test_init_notes_what_dvc_would_trip_on_before_the_first_run(tmp_path):
    from tools.init import dvc_blockers

    write_image(tmp_path / "src/cat/a.png")
    assert dvc_blockers(tmp_path / "src") == []
    (tmp_path / "src/cat/loop.png").symlink_to("loop.png")
    [note] = dvc_blockers(tmp_path / "src")
    assert "src/cat/loop.png" in note and "Errno 40" in note and "tools.doctor" in note
