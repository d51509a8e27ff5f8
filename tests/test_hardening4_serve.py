"""Issue 54, items 4, 7, 11 and 14 for `tools.serve`: a reload follows GTO's stage, a version
that loads but fails its first inference is refused (409) with nothing changed, the loopback
check of POST /admin/reload trusts only the socket's peer, and the small answers (a trailing
slash, a 70,000-character name, a bare registry's reload log) are right.

Real `tools.serve` processes on a real registry (tests/fake_registry.py), as
tests/test_serve_registry.py.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import ROOT, wait_ready
from tests.fake_registry import CLASSES, assign, build, copy_repo, register, save, tiny_png
from tests.test_serve_registry import served_by, serve, wait_for
from tools.project import dvc, git

pytestmark = pytest.mark.e2e  # git, dvc repro and dvc push of a tiny registry


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    return build(tmp_path_factory.mktemp("registry4s"))


@pytest.fixture
def repo(registry, tmp_path):
    return copy_repo(registry, tmp_path)


@pytest.fixture(scope="module")
def png(tmp_path_factory) -> bytes:
    return tiny_png(tmp_path_factory.mktemp("img"))


def test_a_bare_registrys_reload_logs_no_git_progress_and_the_small_answers(registry, tmp_path,
                                                                             png):
    """Item 14: reloads from a bare registry wrote git's progress ("counting objects: 13,
    done.") into the server log; POST /admin/reload/ was redirected (307); a 70,000-character
    name gave a 70 KB 404 body."""
    origin = Path(shutil.copytree(registry.origin, tmp_path / "origin.git"))
    with serve(origin, "ocr#prod") as (url, _):
        assign(origin, "ocr", "v0.2.0")
        answer = httpx.post(f"{url}/admin/reload", timeout=60)
        assert answer.json() == {"reloaded": {"ocr": {"from": "v0.1.0", "to": "v0.2.0"}},
                                 "unchanged": []}
        slash = httpx.post(f"{url}/admin/reload/", timeout=60)
        assert slash.status_code == 200 and slash.json()["unchanged"] == ["ocr"]
        long = httpx.get(f"{url}/model/{'x' * 60000}", timeout=60)  # httpx's most: 65,536
        assert long.status_code == 404 and len(long.content) < 1000, len(long.content)
        assert "60000 characters" in long.json()["detail"]
    log = (tmp_path / "serve.log").read_text()
    assert "counting objects" not in log and "pack data" not in log, log


def test_a_reload_follows_gtos_stage(repo, png):
    """Item 4: after `gto deprecate ocr v0.1.0 prod` serve kept serving v0.1.0 and a reload
    said "unchanged"."""
    from gto.api import unassign

    with serve(repo, "ocr#prod") as (url, _):
        unassign(str(repo), "ocr", version="v0.1.0", stage="prod")
        failed = httpx.post(f"{url}/admin/reload", timeout=60)
        assert failed.status_code == 409, failed.text
        assert failed.json()["detail"] == (
            "reload failed, nothing changed: ocr: stage prod of ocr is assigned to no version "
            f"in {repo} (gto show ocr): assign one (gto assign ocr --version v1.2.0 --stage "
            "prod)")
        answer = httpx.post(f"{url}/predict", files=[("files", ("x.png", png))]).json()
        assert served_by(answer) == ("ocr", "v0.1.0")


def write_failing_onnx(path: Path) -> None:
    """A model that loads (its metadata and declared shapes are those of tests/fake_registry)
    but fails every inference: it reshapes the 64 inputs of an image into rows of 5."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["input", "shape"], ["rows"]),
         helper.make_node("MatMul", ["rows", "w"], ["logits"])],
        "failing", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", len(CLASSES)])],
        [numpy_helper.from_array(np.array([-1, 5], np.int64), "shape"),
         numpy_helper.from_array(np.zeros((5, len(CLASSES)), np.float32), "w")])
    save(graph, path)


def test_a_version_that_fails_its_first_inference_changes_nothing(repo, png):
    """Item 11: answered 400 with two tracebacks in the log, SIGHUP logged nothing, and the
    slots started before the failure were not stopped."""
    write_failing_onnx(repo / "src/ocr.onnx")
    dvc(repo, "repro", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a model that fails")
    dvc(repo, "push", "-q")
    register(repo, "ocr", "v0.3.0")
    register(repo, "detector", "v0.2.0")  # the same bytes: loads and runs
    with serve(repo, "detector#prod", "ocr#prod") as (url, proc):
        # detector's new slot is started first, then ocr's fails: both stay as they were
        assign(repo, "detector", "v0.2.0")
        assign(repo, "ocr", "v0.3.0")
        failed = httpx.post(f"{url}/admin/reload", timeout=60)
        assert failed.status_code == 409, failed.text
        detail = failed.json()["detail"]
        assert detail.startswith("reload failed, nothing changed: ocr: ") and "\n" not in detail
        answer = httpx.post(f"{url}/predict/ocr", files=[("files", ("x.png", png))]).json()
        assert served_by(answer) == ("ocr", "v0.1.0")
        answer = httpx.post(f"{url}/predict/detector", files=[("files", ("x.png", png))]).json()
        assert served_by(answer) == ("detector", "v0.1.0")
        proc.send_signal(signal.SIGHUP)
        log = repo.parent / "serve.log"
        wait_for(lambda: "SIGHUP: reload failed, nothing changed: ocr: " in log.read_text(),
                 timeout=60)
        assert proc.poll() is None
    assert "Traceback" not in log.read_text()


def local_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (None when it has none)."""
    proc = subprocess.run(["hostname", "-I"], capture_output=True, text=True)
    for address in proc.stdout.split():
        if "." in address and not address.startswith("127."):
            return address
    return None


def test_a_forwarded_for_header_never_makes_a_client_loopback(registry, tmp_path):
    """Item 7: with FORWARDED_ALLOW_IPS='*' (common in container images) uvicorn took the
    client from X-Forwarded-For: a request from another address claiming 127.0.0.1 was
    reloaded, 3 of 3. The check is now on the socket's own peer."""
    address = local_address()
    if address is None:
        pytest.skip("this machine has no address besides loopback")
    with socket.socket() as s:
        s.bind((address, 0))
        port = s.getsockname()[1]
    log = tmp_path / "serve.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tools.serve", "--model", registry.repo / "src/detector.onnx",
             "--host", "0.0.0.0", "--expose", "--port", str(port), "--log-level", "warning"],
            cwd=tmp_path, stdout=f, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "FORWARDED_ALLOW_IPS": "*"})
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}", log)
        spoofed = {"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http"}
        for _ in range(3):
            refused = httpx.post(f"http://{address}:{port}/admin/reload", headers=spoofed)
            assert refused.status_code == 403, refused.text
        local = httpx.post(f"http://127.0.0.1:{port}/admin/reload",
                           headers={"X-Forwarded-For": "10.0.0.9"})
        assert local.status_code == 200 and local.json()["unchanged"] == ["default"]
    finally:
        proc.terminate()
        proc.wait(20)
