"""Detection end to end (issue 18), on one tiny `dvc repro` (detection_project): the outs, a
second repro that does nothing, the parity gate failing on a perturbed export and naming the
image, predict rows with boxes in the original image's pixels, and a real HTTP server
answering the same boxes."""
import json
import os
import re
import socket
import subprocess
import sys

import httpx
import numpy as np
import pytest
import yaml
from PIL import Image

from stages.lib.hooks import env_name
from tests.conftest import ROOT, copy_run, run_stage, run_tool, wait_ready

pytestmark = pytest.mark.e2e


def test_outs_of_a_detection_run(detection_project):
    from tools.project import dvc

    p = detection_project
    ev = json.loads((p / "metrics/eval.json").read_text())
    assert {"map", "map50", "map75", "map_small", "map_medium", "map_large", "precision",
            "recall", "per_class_ap"} <= set(ev)
    assert set(ev["per_class_ap"]) == {"circle", "square", "triangle"}
    for name in ("pr_curve.png", "bad_cases.png", "predictions.png", "per_class.json",
                 "bad_cases.csv"):
        assert (p / "plots/eval" / name).stat().st_size > 0
    export = json.loads((p / "metrics/export.json").read_text())
    assert export["detection_agreement"] == 1.0
    manifest = (p / "data/manifest.csv").read_text()
    assert "annotation_sha256" in manifest.splitlines()[0]
    html = (p / "reports/run.html").read_text()
    assert "AP per class" in html and "Precision-recall" in html
    assert ("AP small" in html) == (ev["map_small"] >= 0)
    import onnx

    meta = {m.key: json.loads(m.value) for m in onnx.load(p / "models/model.onnx").metadata_props}
    assert meta["task"] == "detection" and meta["classes"] == ["circle", "square", "triangle"]
    assert "Running stage" not in dvc(p, "repro").stdout  # the second repro does nothing


def test_parity_gate_fails_naming_the_image(detection_project, tmp_path):
    run = copy_run(detection_project, tmp_path / "run")
    params = yaml.safe_load((run / "params.yaml").read_text())
    # the 1-epoch model's peaks score about 0.01: this keeps a few per image
    params["evaluate"]["score_threshold"] = 0.0105
    (run / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(ROOT), env_name("EXPORT_MEAN_SHIFT"): "0.5"}
    proc = subprocess.run([sys.executable, "-m", "stages.export"], cwd=run, env=env,
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert re.search(r"Worst image: images/test/\d+\.png", proc.stderr), proc.stderr
    assert "models/model.onnx and the other formats were not written" in proc.stderr
    ok = run_stage("export", cwd=run)  # unperturbed: every detection matches one to one
    assert ok.returncode == 0, ok.stderr


def test_predict_rows_carry_boxes_in_original_pixels(detection_project, tmp_path):
    from stages.tasks.detection.boxes import detections
    from stages.lib.modality.imageserve import read as read_image
    from tools.inference import load

    p = detection_project
    src = sorted((p / "data/sample/images/test").glob("*.png"))[0]
    wide = tmp_path / "wide.png"
    Image.open(src).resize((300, 120)).save(wide)
    out = tmp_path / "rows.jsonl"
    proc = run_tool("predict", str(wide), str(src), "--out", str(out), "--model",
                    str(p / "models/model.onnx"), "--score-threshold", "0.01", cwd=p)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["path"] for r in rows] == [str(wide), str(src)]
    model = load("onnxruntime", p / "models/model.onnx")
    assert model.letterbox == {"fill": 114, "align": "center"}  # detection's default
    raw = model.logits(read_image(wide, model.image_size, model.channels,
                                  letterbox=model.letterbox)[None])[0]
    expected = detections(raw, 0.01)
    boxes = rows[0]["boxes"]
    assert len(boxes) == len(expected) > 0
    for box, d in zip(boxes, expected, strict=True):
        assert box["label"] in ("circle", "square", "triangle")
        assert box["score"] == pytest.approx(float(d[4]), abs=1e-5)
        # letterboxed: 300 x 120 -> 64 x 26 (120 * 64 / 300 = 25.6), 19 grey rows above
        side = model.image_size
        assert side == 64
        want = np.clip((d[:4] - [0, 19, 0, 19]) * [300 / 64, 120 / 26, 300 / 64, 120 / 26],
                       0, [300, 120, 300, 120])
        assert [box[k] for k in ("x1", "y1", "x2", "y2")] == pytest.approx(want, abs=0.01)
    none = tmp_path / "none.jsonl"
    proc = run_tool("predict", str(src), "--out", str(none), "--model",
                    str(p / "models/model.onnx"), "--score-threshold", "1.0", cwd=p)
    assert json.loads(none.read_text())["boxes"] == []  # zero detections: an empty list


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_boxes_like_predict(detection_project, tmp_path):
    p = detection_project
    src = sorted((p / "data/sample/images/test").glob("*.png"))[1]
    out = tmp_path / "rows.jsonl"
    run_tool("predict", str(src), "--out", str(out), "--model", str(p / "models/model.onnx"),
             "--score-threshold", "0.01", cwd=p)
    row = json.loads(out.read_text())
    port = free_port()
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "tools.serve", "--port", str(port),
                             "--model", str(p / "models/model.onnx"), "--score-threshold",
                             "0.01", "--log-level", "warning"], cwd=tmp_path, stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, tmp_path / "serve.log")
        answer = httpx.post(f"{url}/predict", files=[("files", (src.name, src.read_bytes()))],
                            timeout=60)
        assert answer.status_code == 200, answer.text
        prediction = answer.json()["predictions"][0]
        assert prediction["filename"] == src.name
        assert prediction["boxes"] == row["boxes"]
        assert httpx.get(f"{url}/model").json()["task"] == "detection"
    finally:
        proc.terminate()
        proc.wait(20)
