"""Issue 41, item 10: one model, one version string everywhere: the ONNX metadata, predict's
rows (onnxruntime and torch), serve's /ready, /model and /predict, and the report.

The version is stages.lib.model.provenance.model_version: the first 12 hex digits of the sha256 of
models/model.pt. A real `dvc repro` run (trained_project), a real predict and a real server.
"""
import hashlib
import json
import re

import httpx
import pytest

from tests.conftest import run_tool, serving

pytestmark = pytest.mark.e2e


def test_one_model_has_one_version_everywhere(trained_project, tmp_path):
    import onnx

    weights = hashlib.sha256((trained_project / "models/model.pt").read_bytes()).hexdigest()
    version = weights[:12]
    onnx_file = trained_project / "models/model.onnx"
    image = next(p for p in sorted((trained_project / "data/sample").rglob("*")) if p.is_file())
    for backend in ("onnxruntime", "torch"):
        out = tmp_path / f"{backend}.jsonl"
        proc = run_tool("predict", str(image), "--backend", backend, "--out", str(out),
                        cwd=trained_project)
        assert proc.returncode == 0, proc.stderr
        assert [json.loads(line)["model"] for line in out.read_text().splitlines()] == [
            version], backend

    with serving(onnx_file, tmp_path) as url:
        card = httpx.get(f"{url}/model").json()
        assert card["version"] == version and card["weights_sha256"] == weights
        assert httpx.get(f"{url}/ready").json()["model_version"] == version
        answer = httpx.post(f"{url}/predict", files={"files": (image.name,
                                                               image.read_bytes())})
        assert answer.status_code == 200 and answer.json()["model_version"] == version

    meta = {p.key: json.loads(p.value) for p in onnx.load(str(onnx_file)).metadata_props}
    assert meta["model_version"] == version and meta["model_sha256"] == weights
    # the deployable file's own hash is another string: it is not the version
    assert hashlib.sha256(onnx_file.read_bytes()).hexdigest()[:12] != version

    report = (trained_project / "reports/run.html").read_text()
    shown = re.findall(r'data-key="model_version">([^<]*)<', report)
    assert shown == [version], shown

    from stages.lib.model.provenance import model_version

    assert model_version(weights) == version  # the one definition, shared
