"""Issue 17, item 9 (serve): one bad file no longer fails a multi-file request; every file gets
its own answer and the response an overall status."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_tool, wait_ready
from tests.test_serve import free_port, post

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def own_server(own_data_project, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("own-serve") / "serve.log"
    port = free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tools.serve", "--port", str(port),
                                 "--log-level", "warning"], cwd=own_data_project, stdout=log,
                                stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log_path)
        yield url
    finally:
        proc.terminate()
        proc.wait(20)


def test_a_bad_file_gets_its_own_error_and_the_rest_are_answered(own_server, own_data_project):
    good = own_data_project / "data/mine/green/green_004.png"
    broken = own_data_project / "data/mine/blue/broken.png"
    response = post(own_server, ("notes.txt", b"not an image"), (good.name, good.read_bytes()),
                    (broken.name, broken.read_bytes()))
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["status"], body["failed"]) == ("partial", 2)
    notes, green, bad = body["predictions"]
    assert [p["filename"] for p in body["predictions"]] == ["notes.txt", good.name, broken.name]
    assert notes["error"].startswith("unsupported: ") and notes["label"] == ""
    assert notes["score"] is None and notes["topk"] == []
    assert bad["error"].startswith("unsupported: ")  # a PNG signature, then junk
    row = json.loads(run_tool("predict", str(good), cwd=own_data_project).stdout)
    assert green["error"] == "" and green["label"] == row["label"] == "green"
    assert green["score"] == pytest.approx(row["score"], abs=1e-5)

    everything_ok = post(own_server, (good.name, good.read_bytes())).json()
    assert (everything_ok["status"], everything_ok["failed"]) == ("ok", 0)
    # nothing usable: the request fails, naming every file (415: none is an image; 422 when
    # one is an image that cannot be used)
    response = post(own_server, ("a.txt", b"text"), (broken.name, broken.read_bytes()))
    assert response.status_code == 415
    assert "a.txt: " in response.json()["detail"] and "broken.png: " in response.json()["detail"]
