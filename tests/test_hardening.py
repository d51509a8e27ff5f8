"""Issue 14, the hostile pass: each defect it found, on real files, FIFOs, sockets and servers.

A fast model: the fake post-train project exported once (seconds, no `dvc repro`).
Permission cases drop root's CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH with `setpriv`, so a
mode-000 file or folder is unreadable even to root (as it is to any other user).
"""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_stage, write_image
from tests.fake_model_project import limit_file_size

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


# --- 2, 3. ingest: FIFOs, sockets, devices, loops, unreadable entries are blocking rows ----

def test_ingest_gives_special_and_unreadable_entries_blocking_rows(tmp_path):
    import csv

    from stages.lib import checks
    from stages.tasks import default_task

    src = tmp_path / "imgs"
    write_image(src / "cat/a.png", size=(20, 20))
    write_image(src / "dog/b.png", size=(20, 20))
    make_special(src / "cat")
    (src / "cat/loop.png").symlink_to("loop.png")
    (src / "cat/x.png").symlink_to("y.png")
    (src / "cat/y.png").symlink_to("x.png")
    expected = {"cat/pipe.png": "not_regular", "cat/sock.png": "not_regular",
                "cat/loop.png": "symlink", "cat/x.png": "symlink", "cat/y.png": "symlink",
                "cat/locked.png": "unreadable", "dog/closed": "unreadable"}
    try:
        os.mknod(src / "dog/null.png", 0o600 | 0o020000, os.makedev(1, 3))  # a char device
        expected["dog/null.png"] = "not_regular"
    except (PermissionError, OSError):
        pass
    locked = write_image(src / "cat/locked.png", size=(20, 20))
    closed = src / "dog/closed"
    write_image(closed / "c.png", size=(20, 20))
    (tmp_path / "params.yaml").write_text("data:\n  source: imgs\ningest:\n  workers: 1\n")
    locked.chmod(0)
    closed.chmod(0)
    try:
        prefix = NO_DAC if os.geteuid() == 0 and can_drop_dac() else []
        proc = subprocess.run([*prefix, sys.executable, "-m", "stages.ingest"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        locked.chmod(0o644)
        closed.chmod(0o755)
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "data/manifest.csv", newline="") as f:
        rows = {r["path"]: r for r in csv.DictReader(f)}
    assert {p: r["error_kind"] for p, r in rows.items() if r["error_kind"]} == expected
    assert rows["cat/a.png"]["error"] == "" and rows["dog/b.png"]["error"] == ""
    blocking = checks.blocking(default_task())
    assert {"not_regular", "unreadable", "symlink"} <= set(blocking)
    assert {"not_regular", "unreadable"} <= set(checks.ingest_errors(default_task().modality))


# --- 6. the ingest cache: ctime and inode in the key, racy files, verify_cache ------------

def test_ingest_cache_sees_same_size_same_mtime_replacement(tmp_path):
    import marshal

    from stages.ingest import inventory
    from tests.test_ingest import backdate, make_tree

    root = tmp_path / "src"
    make_tree(root)
    cache = tmp_path / "cache.marshal"
    inventory(root, 1, 0, cache)
    target = root / "cat/a.png"
    st = target.stat()
    target.write_bytes(os.urandom(st.st_size))  # other bytes, the same size...
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # ...and the mtime put back
    rows, stats = inventory(root, 1, 0, cache)
    assert stats["inspected"] == 1
    assert rows == inventory(root, 1, 0, None)[0]
    assert {r["path"]: r for r in rows}["cat/a.png"]["error_kind"] == "undecodable"

    # racy: a file modified in the second its run started is hashed again next time
    write_image(root / "dog/new.png", seed=7)
    assert inventory(root, 1, 0, cache)[1]["inspected"] == 1
    assert inventory(root, 1, 0, cache)[1]["inspected"] == 1  # still racy
    backdate(root / "dog")
    inventory(root, 1, 0, cache)
    assert inventory(root, 1, 0, cache)[1]["inspected"] == 0

    # verify_cache: a stale sha256 the key cannot see fails loudly and drops the cache
    from stages.ingest import facts_of
    from stages.lib.io import StageError
    from stages.tasks import default_task

    data = marshal.loads(cache.read_bytes())
    facts = list(data["facts"]["dog/c.png"])
    facts[facts_of(default_task().modality).index("sha256")] = "0" * 64
    data["facts"]["dog/c.png"] = facts
    cache.write_bytes(marshal.dumps(data))
    assert inventory(root, 1, 0, cache, verify="none")[1]["verified"] == 0
    cache.write_bytes(marshal.dumps(data))
    for mode in ("sample", "all"):
        with pytest.raises(StageError, match="dog/c.png: its bytes changed"):
            inventory(root, 1, 0, cache, verify=mode)
        assert not cache.exists()
        cache.write_bytes(marshal.dumps(data))
    cache.unlink()
    inventory(root, 1, 0, cache)
    assert inventory(root, 1, 0, cache, verify="all")[1]["verified"] == 6  # every file


# --- serve: a real server on a free loopback port ----------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model, tmp_path, *args):
    import time

    import httpx

    port = free_port()
    log = open(tmp_path / f"serve-{port}.log", "w")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    proc = subprocess.Popen([sys.executable, "-m", "tools.serve", "--model", str(model),
                             "--port", str(port), "--log-level", "warning", *args],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, (tmp_path / f"serve-{port}.log").read_text()
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return proc, url, port, tmp_path / f"serve-{port}.log"
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.2)


def stop(proc):
    proc.terminate()
    proc.wait(20)


# 7. every interface only on purpose

@pytest.mark.parametrize("host", ["", "0", "::", "0.0.0.0", "192.0.2.1"])
def test_a_host_that_is_not_loopback_is_refused_without_expose(host, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tools.serve", "--host", host, "--model",
                           str(tmp_path / "none.onnx")], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr
    assert "--expose" in proc.stderr and "Traceback" not in proc.stderr


def test_expose_binds_every_interface_with_a_warning_naming_them(onnx_model, tmp_path):
    import httpx

    proc, url, port, log = start_server(onnx_model, tmp_path, "--host", "0.0.0.0", "--expose")
    try:
        assert httpx.get(f"{url}/health").status_code == 200
        text = log.read_text()
        names = [name for _, name in socket.if_nameindex()]
        assert "every interface" in text and all(name in text for name in names), text
    finally:
        stop(proc)
    proc, url, port, log = start_server(onnx_model, tmp_path, "--host", "127.0.0.1")
    stop(proc)
    assert "warning" not in log.read_text()


# 8. timeouts, connection limit, offline docs

def raw(port, data: bytes, wait: float) -> tuple[bytes, float]:
    """Send data on a new connection and read until the server closes it (or wait passes):
    (what came back, seconds until the close)."""
    import time

    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(wait)
        s.sendall(data)
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except TimeoutError:
            return got, float("inf")
    return got, time.monotonic() - start


def test_stalled_headers_bodies_and_idle_connections_are_cut_off(onnx_model, tmp_path):
    proc, url, port, log = start_server(onnx_model, tmp_path, "--header-timeout", "1",
                                        "--body-timeout", "1", "--keep-alive-timeout", "1")
    try:
        got, seconds = raw(port, b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Le", 10)
        assert got.startswith(b"HTTP/1.1 408") and seconds < 5, (got, seconds)
        got, seconds = raw(port, b"", 10)  # connects and sends nothing
        assert got.startswith(b"HTTP/1.1 408") and seconds < 5, (got, seconds)
        body = b"--b\r\nContent-Disposition: form-data; name=\"files\"; filename=\"a.png\"\r\n"
        head = (b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; "
                b"boundary=b\r\nContent-Length: 5000\r\n\r\n")
        got, seconds = raw(port, head + body, 10)  # under-sends its Content-Length
        assert got.startswith(b"HTTP/1.1 408") and seconds < 5, (got, seconds)
        got, seconds = raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 10)  # keep-alive
        assert got.startswith(b"HTTP/1.1 200") and seconds < 5, (got, seconds)
    finally:
        stop(proc)
    assert "Traceback" not in log.read_text()


# --limit-concurrency (in-flight predicts, not connections): tests/test_serve_load.py


def test_serve_defaults_are_the_documented_ones():
    from click.testing import CliRunner

    from tools.serve.__main__ import main

    text = CliRunner().invoke(main, ["--help"], terminal_width=200).output
    text = text.split("Options:", 1)[1]  # the description names options too
    for option, default in (("--header-timeout", "10.0"), ("--body-timeout", "30.0"),
                            ("--keep-alive-timeout", "5"), ("--limit-concurrency", "64"),
                            ("--max-decode-mb", "256"), ("--predict-timeout", "30.0")):
        assert f"{option}" in text and f"default: {default}" in text.split(option, 1)[1][:400]


def test_docs_work_offline(onnx_model, tmp_path):
    import re

    import httpx

    proc, url, port, log = start_server(onnx_model, tmp_path)
    try:
        page = httpx.get(f"{url}/docs").text
        assets = re.findall(r"""(?:src|href)=['"]([^'"]+)['"]""", page)
        assert assets and all(a.startswith("/") for a in assets), assets  # no CDN
        for asset in assets:
            r = httpx.get(url + asset)
            assert r.status_code == 200 and len(r.content) > 100, asset
    finally:
        stop(proc)


# 4. memory: bytes, not only pixels

def test_sixteen_worst_case_requests_stay_under_1_gb_and_health_answers(onnx_model):
    """Memory is bounded (a budget, not a timing); /health's latency is the bench's to print
    (bench/serve_memory.py), never a threshold here: this machine's speed is noise."""
    from bench.serve_memory import RSS_TARGET_MB, run

    # the answer's deadline out of the way: on a loaded machine the 16 decodes may outlast the
    # default --predict-timeout, and a 503 would then say nothing about memory
    result = run(onnx_model, 16, extra=("--predict-timeout", "600"))
    assert result["peak_rss_mb"] < RSS_TARGET_MB, result
    assert result["health_n"] > 0, result  # the probe got answers all through the load
    codes = dict(result["codes"])
    assert codes["big.png"] == 200 and codes["tall.tiff"] == 422, result  # served / refused


# --- 9. prepare and train on a full disk: one line naming the path, exit 1 ---------------

def stage_with_limit(name, cwd, nbytes):
    return subprocess.run([sys.executable, "-m", f"stages.{name}"], cwd=cwd, text=True,
                          capture_output=True, timeout=600, preexec_fn=limit_file_size(nbytes),
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_prepare_and_train_on_a_full_disk_end_with_one_line(tmp_path):
    from tests.fake_model_project import make_prepare_project

    root = make_prepare_project(tmp_path / "project")
    # RLIMIT_FSIZE stands in for a full disk: a write past the limit fails with EFBIG
    proc = stage_with_limit("prepare", root, 500)  # below one shard of 12 8x8 images
    assert proc.returncode == 1, proc.stderr
    line = one_line_error(proc)
    assert "data/processed/" in line and "Free space" in line, line
    assert not list((root / "data/processed").glob(".*.tmp"))  # nothing half-written left
    proc = stage_with_limit("prepare", root, 1 << 30)
    assert proc.returncode == 0, proc.stderr
    proc = stage_with_limit("train", root, 2000)
    assert proc.returncode == 1, proc.stderr
    line = one_line_error(proc)
    assert "cannot write it" in line and "Free space" in line, line


# --- 2. DVC blocks hashing a FIFO under data.source: doctor names it first ----------------

def test_doctor_names_a_fifo_under_data_source_and_dvcignore_clears_it(tmp_path):
    from tools.doctor import FAIL, OK, source_findings

    (tmp_path / "params.yaml").write_text("data:\n  source: src\n")
    write_image(tmp_path / "src/cat/a.png")
    assert [f.level for f in source_findings(tmp_path)] == [OK]
    make_special(tmp_path / "src/cat")
    [finding] = source_findings(tmp_path)
    assert finding.level == FAIL and "src/cat/pipe.png" in finding.message
    assert "src/cat/sock.png" in finding.message and ".dvcignore" in finding.fix
    (tmp_path / ".dvcignore").write_text("src/cat/pipe.png\nsrc/cat/sock.png\n")
    assert [f.level for f in source_findings(tmp_path)] == [OK]


def test_dvc_itself_skips_a_fifo_listed_in_dvcignore(tmp_path):
    """What the doctor's fix relies on: with the FIFO in .dvcignore, `dvc status` on a stage
    depending on its folder finishes (without, it blocks forever inside DVC)."""
    from tools.project import dvc, git

    git(tmp_path, "init", "-q")
    dvc(tmp_path, "init", "-q")
    (tmp_path / "src").mkdir()
    (tmp_path / "src/a.txt").write_text("a\n")
    os.mkfifo(tmp_path / "src/pipe.png")
    (tmp_path / "dvc.yaml").write_text("stages:\n  s:\n    cmd: ls src > out.txt\n"
                                       "    deps: [src]\n    outs: [out.txt]\n")
    (tmp_path / ".dvcignore").write_text("src/pipe.png\n")
    proc = subprocess.run([sys.executable, "-m", "dvc", "repro", "-q"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_an_image_over_the_decode_budget_is_refused_unless_a_jpeg_draft_fits(onnx_model,
                                                                             tmp_path):
    import httpx

    jpeg = write_image(tmp_path / "big.jpg", size=(2000, 1500), mode="RGB", fmt="JPEG")
    png = write_image(tmp_path / "big.png", size=(2000, 1500), mode="RGB")
    proc, url, port, log = start_server(onnx_model, tmp_path, "--max-decode-mb", "2")
    try:
        r = httpx.post(f"{url}/predict", files={"files": ("big.png", png.read_bytes())})
        assert r.status_code == 422 and "decode budget" in r.json()["detail"], r.text
        r = httpx.post(f"{url}/predict", files={"files": ("big.jpg", jpeg.read_bytes())})
        assert r.status_code == 200, r.text  # decoded at 1/8 scale: 250 x 188
    finally:
        stop(proc)
