"""Issue 14, the hostile pass: each defect it found, on real files, FIFOs, sockets and servers.

A fast model: the fake post-train project exported once (seconds, no `dvc repro`).
Permission cases drop root's CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH with `setpriv`, so a
mode-000 file or folder is unreadable even to root (as it is to any other user).
"""
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_stage, write_image

NO_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]


def can_drop_dac() -> bool:
    if os.geteuid() != 0:
        return True  # not root: mode 000 is already unreadable
    try:
        return subprocess.run([*NO_DAC, "true"], capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


@pytest.fixture(scope="session")
def onnx_model(tmp_path_factory) -> Path:
    from tests.fake_model_project import make_fake_project

    root = make_fake_project(tmp_path_factory.mktemp("harden") / "project")
    proc = run_stage("export", cwd=root)
    assert proc.returncode == 0, proc.stderr
    return root / "models/model.onnx"


def predict(cwd, model, *args, no_dac=False, timeout=120, preexec_fn=None):
    prefix = NO_DAC if no_dac and os.geteuid() == 0 else []
    return subprocess.run([*prefix, sys.executable, "-m", "tools.predict", *args,
                           "--model", str(model)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=preexec_fn,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def rows_of(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def one_line_error(proc) -> str:
    """The stderr of a failed run: exactly one line, `Error: ...`, no traceback."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


# --- 1. predict never changes a file that is not its own output ---------------------------

def test_an_out_that_is_not_a_predict_output_is_refused_byte_for_byte_untouched(
        onnx_model, tmp_path):
    write_image(tmp_path / "in/a.png", size=(20, 20))
    photo = write_image(tmp_path / "photo.jpg", size=(64, 48), mode="RGB", fmt="JPEG")
    files = {
        "notes.txt": b"my notes\nthe last line has no newline",
        "photo.jpg": photo.read_bytes(),
        "people.csv": b"name,age\nann,31\nbob,4",
        "other.jsonl": b'{"name": "ann"}\n{"name": "bob"}\n{"name": "ca',
        "rows.csv": b"path,label\nx.png,cat\n",  # a CSV of another model's columns
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    for name, data in files.items():
        proc = predict(tmp_path, onnx_model, "in", "--out", name)
        assert proc.returncode == 1, (name, proc.stderr)
        assert name in one_line_error(proc)
        assert (tmp_path / name).read_bytes() == data, name


def test_a_torn_predict_output_is_still_repaired_and_completed(onnx_model, tmp_path):
    for i in range(3):
        write_image(tmp_path / f"in/{i}.png", size=(20, 20), seed=i)
    out = tmp_path / "p.jsonl"
    assert predict(tmp_path, onnx_model, "in", "--out", "p.jsonl").returncode == 0
    full = out.read_bytes()
    out.write_bytes(full[:-20])  # the last row torn
    proc = predict(tmp_path, onnx_model, "in", "--out", "p.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert sorted(r["path"] for r in rows_of(out)) == ["in/0.png", "in/1.png", "in/2.png"]
    out.write_bytes(b'{"pa')  # torn inside the first row: still ours
    assert predict(tmp_path, onnx_model, "in", "--out", "p.jsonl").returncode == 0
    assert len(rows_of(out)) == 3


# --- 2, 5. predict: FIFOs, sockets, loops, unreadable folders: one row each, no hang -------

def make_special(folder) -> list[str]:
    """A FIFO and a bound Unix socket in folder; their names."""
    folder.mkdir(parents=True, exist_ok=True)
    os.mkfifo(folder / "pipe.png")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(folder / "sock.png"))
    sock.close()  # the socket file stays
    return ["pipe.png", "sock.png"]


def test_fifo_and_socket_get_error_rows_and_are_never_opened(onnx_model, tmp_path):
    write_image(tmp_path / "in/a.png", size=(20, 20))
    make_special(tmp_path / "in")
    proc = predict(tmp_path, onnx_model, "in", "in/pipe.png", "--out", "p.jsonl", timeout=60)
    assert proc.returncode == 3, proc.stderr
    rows = {r["path"]: r for r in rows_of(tmp_path / "p.jsonl")}
    assert sorted(rows) == ["in/a.png", "in/pipe.png", "in/sock.png"]
    assert rows["in/a.png"]["error"] == ""
    assert rows["in/pipe.png"]["error"].startswith("not_regular: a FIFO")
    assert rows["in/sock.png"]["error"].startswith("not_regular: a socket")


def test_every_named_input_gives_exactly_one_row(onnx_model, tmp_path):
    write_image(tmp_path / "in/a/1.png", size=(20, 20))
    write_image(tmp_path / "elsewhere/2.png", size=(20, 20))
    (tmp_path / "in/linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "in/a/up").symlink_to(tmp_path / "in", target_is_directory=True)  # a loop
    (tmp_path / "in/a/self.png").symlink_to("self.png")  # a symlink cycle
    locked = tmp_path / "in/locked"
    write_image(locked / "3.png", size=(20, 20))
    locked.chmod(0)
    try:
        proc = predict(tmp_path, onnx_model, "in", "--out", "p.jsonl", timeout=60,
                       no_dac=can_drop_dac())
    finally:
        locked.chmod(0o755)
    assert proc.returncode == 3, proc.stderr
    rows = {r["path"]: r["error"] for r in rows_of(tmp_path / "p.jsonl")}
    assert len(rows) == len(rows_of(tmp_path / "p.jsonl"))  # no path twice
    assert rows["in/a/1.png"] == "" and rows["in/linked/2.png"] == ""
    assert rows["in/a/up"].startswith("symlink_loop:")
    assert rows["in/a/self.png"].startswith("symlink_loop:")
    assert rows["in/locked"].startswith("unreadable:")
    assert len(rows) == 5, rows


def test_a_glob_does_not_follow_symlink_loops(onnx_model, tmp_path):
    write_image(tmp_path / "d/sub/1.jpg", size=(20, 20), fmt="JPEG")
    (tmp_path / "d/sub/loop1").symlink_to(tmp_path / "d", target_is_directory=True)
    (tmp_path / "d/loop2").symlink_to(tmp_path / "d/sub", target_is_directory=True)
    proc = predict(tmp_path, onnx_model, "d/**/*.jpg", "--out", "p.jsonl", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [r["path"] for r in rows_of(tmp_path / "p.jsonl")] == ["d/sub/1.jpg"]


# --- 9. predict: an unwritable or full --out ends with one line and exit 1 ---------------

def limit_file_size(nbytes):
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return limit


def test_unwritable_or_full_out_is_one_line_exit_1(onnx_model, tmp_path):
    for i in range(40):
        write_image(tmp_path / f"in/{i:02d}.png", size=(20, 20), seed=i)
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    proc = predict(tmp_path, onnx_model, "in", "--out", "ro/p.jsonl", no_dac=can_drop_dac())
    assert proc.returncode == 1
    assert "ro/p.jsonl" in one_line_error(proc) and "Permission denied" in proc.stderr
    # RLIMIT_FSIZE stands in for a full disk: writes past 2,000 bytes fail with EFBIG.
    proc = predict(tmp_path, onnx_model, "in", "--out", "p.jsonl", "--batch-size", "4",
                   preexec_fn=limit_file_size(2000))
    assert proc.returncode == 1
    line = one_line_error(proc)
    assert "p.jsonl" in line and "free space" in line
    proc = predict(tmp_path, onnx_model, "in", "--out", "p.jsonl")  # room again: completes
    assert proc.returncode == 0, proc.stderr
    assert sorted(r["path"] for r in rows_of(tmp_path / "p.jsonl")) == [
        f"in/{i:02d}.png" for i in range(40)]
