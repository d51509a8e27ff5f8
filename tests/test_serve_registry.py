"""Issue 39, items 4 and 5: serve by name, several models in one server, and a new version
swapped in while clients keep asking.

A real `tools.serve` process serves `detector#prod` and `ocr#prod` of a real git repository
(tests/fake_registry.py: tiny ONNX graphs whose label says which version answered). While 16
clients post images, `gto assign` moves ocr's prod to v0.2.0 and POST /admin/reload (or
SIGHUP) swaps it in: no request fails, every answer names the version that computed it, and
the answers after the reload name the new one.
"""
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, wait_ready
from tests.fake_registry import LABELS, assign, build, copy_repo, tiny_png
from tests.test_serve import free_port

pytestmark = pytest.mark.e2e  # git, dvc repro and dvc push of a tiny registry

CLIENTS = 16


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    return build(tmp_path_factory.mktemp("registry"))


@pytest.fixture
def repo(registry, tmp_path):
    """A copy of the registry's repository, which a test may assign stages in."""
    return copy_repo(registry, tmp_path)


@pytest.fixture(scope="module")
def png(tmp_path_factory) -> bytes:
    return tiny_png(tmp_path_factory.mktemp("img"))


@contextlib.contextmanager
def serve(repo: Path, *models, env=None):
    """A real server of models (registered names) from repo's registry: (url, process)."""
    port = free_port()
    log = repo.parent / "serve.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tools.serve", "--port", str(port), "--registry", str(repo),
             "--log-level", "warning", *(a for m in models for a in ("--model", m))],
            cwd=repo.parent, stdout=f, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "DVC_NO_ANALYTICS": "1",
                 "IMAGE_PIPELINE_MODEL_CACHE": str(repo.parent / "cache"), **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log)
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(20)


def post(client, url, name, png):
    return client.post(f"{url}/predict/{name}", files=[("files", ("x.png", png))], timeout=60)


def served_by(answer: dict) -> tuple:
    """(artifact, version) the answer names, checked against the label it computed."""
    key = (answer["registry"]["artifact"], answer["registry"]["version"])
    assert answer["predictions"][0]["label"] == LABELS[key], answer
    return key


def test_two_models_by_name(repo, png):
    with serve(repo, "detector#prod", "ocr#prod") as (url, _):
        models = httpx.get(f"{url}/models").json()["models"]
        assert [(m["name"], m["registry"]["version"], m["registry"]["stage"])
                for m in models] == [("detector", "v0.1.0", "prod"), ("ocr", "v0.1.0", "prod")]
        assert httpx.get(f"{url}/ready").json()["models"].keys() == {"detector", "ocr"}
        with httpx.Client() as client:
            for name in ("detector", "ocr"):
                answer = post(client, url, name, png)
                assert answer.status_code == 200, answer.text
                assert served_by(answer.json()) == (name, "v0.1.0")
                card = client.get(f"{url}/model/{name}").json()
                assert card["registry"]["commit"] == answer.json()["registry"]["commit"]
                assert card["registry"]["data_version"] == ("d" if name == "detector"
                                                            else "0") * 32
            one = client.post(f"{url}/predict", files=[("files", ("x.png", png))])
            assert one.status_code == 400 and "/predict/NAME" in one.json()["detail"]
            assert client.get(f"{url}/model").status_code == 400
            missing = post(client, url, "plates", png)
            assert missing.status_code == 404 and "detector, ocr" in missing.json()["detail"]
            unchanged = client.post(f"{url}/admin/reload").json()
            assert unchanged == {"reloaded": {}, "unchanged": ["detector", "ocr"]}
    with serve(repo, "ocr@v0.2.0") as (url, _):  # one model: POST /predict serves it
        answer = httpx.post(f"{url}/predict", files=[("files", ("x.png", png))])
        assert served_by(answer.json()) == ("ocr", "v0.2.0")
        assert httpx.get(f"{url}/model").json()["registry"]["version"] == "v0.2.0"


def test_prod_moves_under_16_clients_and_no_request_fails(repo, png):
    """The acceptance test: one server, two models, 16 concurrent clients; prod moves to
    v0.2.0 and the server reloads."""
    answers, failures, stop = [], [], threading.Event()
    reloaded_at = []

    def client_loop(i: int):
        names = ("detector", "ocr") if i % 2 else ("ocr", "detector")
        with httpx.Client() as client:
            n = 0
            while not stop.is_set():
                name = names[n % 2]
                n += 1
                started = time.monotonic()
                try:
                    r = post(client, url, name, png)
                except httpx.HTTPError as exc:
                    failures.append(f"{name}: {exc!r}")
                    continue
                if r.status_code != 200:
                    failures.append(f"{name}: {r.status_code} {r.text}")
                    continue
                answers.append((started, time.monotonic(), name, r.json()))

    # each request holds its model for 0.2 s (a test hook): requests are in flight on the old
    # model while it is swapped out
    with serve(repo, "detector#prod", "ocr#prod",
               env={"PIPELINE_TEST_SERVE_DELAY_S": "0.2"}) as (url, _):
        threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: len(answers) >= 100)
            assign(repo, "ocr", "v0.2.0")
            sent = time.monotonic()
            outcome = httpx.post(f"{url}/admin/reload", timeout=60)
            reloaded_at.append(time.monotonic())
            before = len(answers)
            wait_for(lambda: len(answers) >= before + 100)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
    assert failures == []
    assert outcome.status_code == 200, outcome.text
    assert outcome.json() == {"reloaded": {"ocr": {"from": "v0.1.0", "to": "v0.2.0"}},
                              "unchanged": ["detector"]}
    served = [(started, ended, name, served_by(a)) for started, ended, name, a in answers]
    assert all(name == key[0] for _, _, name, key in served)
    assert {key for _, _, name, key in served if name == "detector"} == {("detector", "v0.1.0")}
    ocr = [(started, ended, key[1]) for started, ended, name, key in served if name == "ocr"]
    assert {v for started, _, v in ocr if started > reloaded_at[0]} == {"v0.2.0"}
    assert {v for _, ended, v in ocr if ended < sent} == {"v0.1.0"}
    # in flight at the swap: sent before the reload answered, answered after it, by the old
    # model (and none failed)
    assert any(started < reloaded_at[0] < ended and v == "v0.1.0" for started, ended, v in ocr)


def wait_for(condition, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_sighup_reloads_and_a_failed_reload_changes_nothing(repo, png):
    with serve(repo, "ocr#prod") as (url, proc):
        assign(repo, "ocr", "v0.2.0")
        # the new version's object, corrupt in the model cache: the reload fails, names it
        import yaml

        lock = yaml.safe_load(subprocess.run(
            ["git", "show", "ocr@v0.2.0:dvc.lock"], cwd=repo, capture_output=True, text=True,
            check=True).stdout)
        want = lock["stages"]["ocr"]["outs"][0]["md5"]
        cached = repo.parent / "cache" / want[:2] / want[2:] / "ocr.onnx"
        cached.parent.mkdir(parents=True)
        cached.write_bytes(b"not the model")
        failed = httpx.post(f"{url}/admin/reload", timeout=60)
        assert failed.status_code == 409
        assert "nothing changed: ocr: artifact ocr v0.2.0: the cached copy" in \
            failed.json()["detail"] and want in failed.json()["detail"]
        answer = httpx.post(f"{url}/predict", files=[("files", ("x.png", png))]).json()
        assert served_by(answer) == ("ocr", "v0.1.0")
        cached.unlink()
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: httpx.get(f"{url}/model").json()["registry"]["version"] == "v0.2.0",
                 timeout=60)
        answer = httpx.post(f"{url}/predict", files=[("files", ("x.png", png))]).json()
        assert served_by(answer) == ("ocr", "v0.2.0")
        assert proc.poll() is None  # SIGHUP reloads; it does not stop the server


def test_reload_is_for_loopback_clients_only(registry, tmp_path):
    """An app whose client is not on loopback (Starlette's TestClient calls itself
    `testclient`) gets 403, and nothing reloads."""
    from fastapi.testclient import TestClient

    from tools.inference import load
    from tools.serve.app import create_app

    model = load("onnxruntime", registry.repo / "src/detector.onnx")
    with TestClient(create_app(model)) as client:
        refused = client.post("/admin/reload")
        assert refused.status_code == 403 and "loopback" in refused.json()["detail"]
        assert client.get("/models").json()["models"][0]["name"] == "default"
    from tools.serve.models import loopback

    assert [loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1")] == \
        [True] * 4
    assert not any(loopback(h) for h in ("10.0.0.1", "::ffff:10.0.0.1", "testclient", None, ""))
