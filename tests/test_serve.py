"""serve: a real uvicorn server on a free loopback port, answering like predict does."""
import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.conftest import ROOT, write_image, wait_ready

pytestmark = pytest.mark.e2e  # the model comes from a `dvc repro` run (trained_project)

MAX_BYTES = 200_000
MAX_PIXELS = 100_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(trained_project, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    port = free_port()
    cmd = [sys.executable, "-m", "tools.serve", "--port", str(port),
           "--model", str(trained_project / "models/model.onnx"),
           "--metrics", str(trained_project / "metrics/eval.json"),
           "--max-bytes", str(MAX_BYTES), "--max-pixels", str(MAX_PIXELS),
           "--log-level", "warning"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=log_path.parent, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    wait_ready(proc, url, log_path)
    yield SimpleNamespace(url=url, log=log_path)
    proc.terminate()
    proc.wait(20)


@pytest.fixture(scope="module")
def expected(trained_project, tmp_path_factory):
    """predict's rows for the sample images: what the API must answer, path -> row."""
    out = tmp_path_factory.mktemp("expected") / "p.jsonl"
    proc = subprocess.run([sys.executable, "-m", "tools.predict",
                           str(trained_project / "data/sample"), "--out", str(out),
                           "--model", str(trained_project / "models/model.onnx")],
                          cwd=out.parent, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return {Path(r["path"]): r for r in rows}


def post(url, *files, **kwargs):
    return httpx.post(f"{url}/predict", files=[("files", f) for f in files], timeout=30,
                      **kwargs)


def assert_matches(prediction, row):
    assert prediction["label"] == row["label"]
    assert prediction["score"] == pytest.approx(row["score"], abs=1e-5)
    assert [t["label"] for t in prediction["topk"]] == [t["label"] for t in row["topk"]]


def test_health_ready_model_and_docs(server, trained_project):
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}
    ready = httpx.get(f"{server.url}/ready").json()
    card = httpx.get(f"{server.url}/model").json()
    assert ready["model_version"] == card["version"]
    assert card["classes"] == [str(d) for d in range(10)]
    assert card["input"] == {"image_size": 16, "channels": 1, "mean": [0.5], "std": [0.5]}
    eval_metrics = json.loads((trained_project / "metrics/eval.json").read_text())
    assert card["metrics"] == eval_metrics
    docs = httpx.get(f"{server.url}/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    schema = httpx.get(f"{server.url}/openapi.json").json()
    assert "/predict" in schema["paths"]
    # no endpoint takes a path: the only path parameter is a served model's name (a key of
    # the server's own table, GET /models; 404 for any other)
    assert {p for p in schema["paths"] if "{" in p} == {"/predict/{name}", "/model/{name}"}
    assert httpx.get(f"{server.url}/model/default").json()["version"] == card["version"]
    assert httpx.get(f"{server.url}/model/..%2Fparams.yaml").status_code == 404


def test_one_and_several_images_match_predict(server, expected):
    paths = sorted(expected)[:3]
    one = post(server.url, (paths[0].name, paths[0].read_bytes(), "image/x-portable-graymap"))
    assert one.status_code == 200, one.text
    assert_matches(one.json()["predictions"][0], expected[paths[0]])
    many = post(server.url, *[(p.name, p.read_bytes()) for p in paths])
    assert many.status_code == 200, many.text
    body = many.json()
    assert body["model_version"] == httpx.get(f"{server.url}/model").json()["version"]
    assert [p["filename"] for p in body["predictions"]] == [p.name for p in paths]
    for prediction, path in zip(body["predictions"], paths, strict=True):
        assert_matches(prediction, expected[path])


def test_200_requests_from_16_concurrent_clients_are_all_correct(server, expected):
    paths = sorted(expected)
    jobs = [paths[i % len(paths)] for i in range(200)]
    before = httpx.get(f"{server.url}/model").json()["serving"]

    with httpx.Client(base_url=server.url, timeout=60,
                      limits=httpx.Limits(max_connections=16)) as client:
        def ask(path):
            return path, client.post("/predict", files={"files": (path.name, path.read_bytes())})

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(ask, jobs))
    for path, response in answers:
        assert response.status_code == 200, response.text
        assert_matches(response.json()["predictions"][0], expected[path])
    after = httpx.get(f"{server.url}/model").json()["serving"]
    assert after["images"] - before["images"] == 200
    assert after["batches"] - before["batches"] < 200  # concurrent images shared batches


def test_error_codes(server, expected, tmp_path):
    good = sorted(expected)[0].read_bytes()
    cases = {
        415: [("notes.txt", b"this is text, not an image")],
        422: [("cut.png", write_image(tmp_path / "a.png", size=(64, 64)).read_bytes()[:80])],
    }
    for status, files in cases.items():
        response = post(server.url, *files)
        assert response.status_code == status, response.text
        assert files[0][0] in response.json()["detail"]
    # one bad file among good ones: answered per file (tests/test_firsthour_serve.py)
    response = post(server.url, ("good.pgm", good), ("empty.pgm", b""))
    assert response.status_code == 200 and response.json()["status"] == "partial"
    # over the pixel limit: refused from the header (400 x 300 = 120,000 > 100,000)
    big = write_image(tmp_path / "big.png", size=(400, 300)).read_bytes()
    assert len(big) < MAX_BYTES
    response = post(server.url, ("big.png", big))
    assert response.status_code == 422 and "120000 pixels" in response.json()["detail"]
    # over --max-bytes, announced by Content-Length
    response = post(server.url, ("large.pgm", os.urandom(MAX_BYTES + 1)))
    assert response.status_code == 413, response.text
    # over --max-bytes, streamed without Content-Length (chunked): counted as it arrives
    boundary = "b0undary"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; "
            f"filename=\"s.pgm\"\r\nContent-Type: application/octet-stream\r\n\r\n").encode()

    def chunks():
        yield head
        for _ in range(30):
            yield os.urandom(10_000)
        yield f"\r\n--{boundary}--\r\n".encode()

    response = httpx.post(f"{server.url}/predict", content=chunks(), timeout=30,
                          headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert response.status_code == 413, response.text
    # no file field, wrong content type, a path-like request
    assert httpx.post(f"{server.url}/predict", data={"x": "1"}).status_code == 422
    assert httpx.post(f"{server.url}/predict", content=b"{}",
                      headers={"Content-Type": "application/json"}).status_code == 422
    assert httpx.get(f"{server.url}/predict").status_code == 405
    assert httpx.get(f"{server.url}/../../etc/passwd").status_code == 404
    # the server is still healthy and never logged an unhandled error
    assert post(server.url, ("good.pgm", good)).status_code == 200
    assert "unhandled" not in server.log.read_text()


def test_fuzz_from_openapi_schema_finds_no_server_error(server):
    """schemathesis generates valid and invalid requests for every operation of the schema."""
    from hypothesis import given
    from schemathesis.checks import not_a_server_error

    api = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operations = set()
    for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
        @given(case=api.as_strategy(generation_mode=mode))
        @settings(max_examples=50, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        def fuzz(case):
            operations.add(f"{case.method} {case.path}")
            case.call_and_validate(checks=[not_a_server_error], timeout=30)

        fuzz()
    assert operations == {"GET /health", "GET /ready", "GET /model", "POST /predict",
                          "GET /models", "GET /model/{name}", "POST /predict/{name}",
                          "POST /admin/reload"}
    assert "unhandled" not in server.log.read_text(), server.log.read_text()
