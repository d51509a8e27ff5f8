"""Segmentation end to end (issue 19) on the shared tiny run: the outs, the parity gate under a
perturbed export, predict's masks at the input's own size, and a real HTTP server."""
import base64
import io
import json
import os
import subprocess
import sys

import httpx
import numpy as np
import onnx
import pytest
from PIL import Image

from tests.conftest import ROOT, copy_run, run_module, wait_ready
from tools.project import dvc

pytestmark = pytest.mark.e2e


def test_the_run_writes_segmentation_metrics_plots_and_report(segmentation_project):
    p = segmentation_project
    validation = json.loads((p / "metrics/validation.json").read_text())
    seg = validation["segmentation"]
    assert seg["classes"] == ["background", "disc", "box", "blob"]
    assert sum(seg["pixel_frequency"].values()) == pytest.approx(1.0, abs=1e-4)
    assert seg["image_share"]["background"] == 1.0
    assert validation["invalid"] == 0
    metrics = json.loads((p / "metrics/eval.json").read_text())
    for key in ("miou", "dice", "miou_foreground", "dice_foreground", "pixel_accuracy"):
        assert 0.0 <= metrics[key] <= 1.0
    assert set(metrics["iou_per_class"]) == set(seg["classes"])
    names = {f.name for f in (p / "plots/eval").iterdir()}
    assert {"per_class.json", "confusion.csv", "bad_cases.csv", "bad_cases.png",
            "per_class_iou.png"} <= names
    # the confusion matrix counts every labelled test pixel once
    rows = (p / "plots/eval/confusion.csv").read_text().splitlines()[1:]
    total = sum(int(v) for r in rows for v in r.split(",")[1:])
    assert total == metrics["samples"] * 32 * 32
    train = json.loads((p / "metrics/train.json").read_text())
    assert "val_miou" in train
    html = (p / "reports/run.html").read_text()
    assert "Pixel confusion matrix" in html and "image | truth" in html
    props = {m.key: json.loads(m.value)
             for m in onnx.load(str(p / "models/model.onnx")).metadata_props}
    assert props["task"] == "segmentation" and props["classes"] == seg["classes"]
    assert props["ignore_index"] == 255 and props["image_size"] == 32
    export = json.loads((p / "metrics/export.json").read_text())
    assert export["pixel_agreement"] == 1.0


def test_second_repro_does_nothing(segmentation_project, tmp_path):
    run = copy_run(segmentation_project, tmp_path / "again")
    proc = dvc(run, "repro")
    assert "Running stage" not in proc.stdout, proc.stdout


def test_parity_gate_fails_on_a_perturbed_export_naming_the_image(segmentation_project,
                                                                  tmp_path):
    run = copy_run(segmentation_project, tmp_path / "shifted")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PIPELINE_TEST_EXPORT_MEAN_SHIFT": "3.0"}
    proc = subprocess.run([sys.executable, "-m", "stages.export"], cwd=run, env=env,
                          capture_output=True, text=True)
    assert proc.returncode != 0
    test_paths = [line.split(",")[0] for line in
                  (run / "data/split/test.csv").read_text().splitlines()[1:]]
    assert "disagrees with PyTorch" in proc.stderr
    assert any(f"Worst image: {path} " in proc.stderr for path in test_paths), proc.stderr
    assert "argmax pixels per class" in proc.stderr


def test_predict_writes_masks_at_the_inputs_own_size(segmentation_project, tmp_path):
    p = segmentation_project
    images = tmp_path / "in"
    images.mkdir()
    for name in ("00000.png", "00001.png"):
        (images / name).write_bytes((p / "data/sample/images" / name).read_bytes())
    Image.open(images / "00000.png").resize((50, 70)).save(images / "odd.jpg")
    (images / "broken.png").write_bytes(b"not an image")
    out = tmp_path / "p.jsonl"
    proc = run_module("tools.predict", "in", "--out", str(out), "--out-dir", "masks",
                      "--model", str(p / "models/model.onnx"), cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr  # the broken file fails, the rest is predicted
    rows = {r["path"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["in/broken.png"]["error"] and rows["in/broken.png"]["mask_png"] == ""
    odd = rows["in/odd.jpg"]
    assert odd["mask_png"] == "masks/in/odd.jpg.png"
    mask = Image.open(tmp_path / odd["mask_png"])
    assert mask.mode == "L" and mask.size == (50, 70)
    assert odd["size"] == [32, 32] and sum(odd["areas"].values()) == 32 * 32
    full = Image.open(tmp_path / "masks/in/00000.png")
    assert full.size == (128, 128)
    assert set(np.unique(np.asarray(full))) <= {0, 1, 2, 3}
    # the area counts are the run-length code's
    lengths = {}
    for v, n in zip(odd["rle"]["values"], odd["rle"]["lengths"], strict=True):
        lengths[v] = lengths.get(v, 0) + n
    classes = ["background", "disc", "box", "blob"]
    assert {classes[v]: n for v, n in lengths.items()} == odd["areas"]


def test_serve_answers_masks_over_http(segmentation_project, tmp_path):
    import socket

    p = segmentation_project
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "serve.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "tools.serve", "--port", str(port),
                                 "--model", str(p / "models/model.onnx"), "--log-level",
                                 "warning"], cwd=tmp_path, stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log)
        data = (p / "data/sample/images/00003.png").read_bytes()
        r = httpx.post(f"{url}/predict", files=[("files", ("a.png", data, "image/png"))],
                       timeout=30)
        assert r.status_code == 200, r.text
        pred = r.json()["predictions"][0]
        mask = np.asarray(Image.open(io.BytesIO(base64.b64decode(pred["mask_png"]))))
        assert mask.shape == (32, 32) and pred["size"] == [32, 32]
        from stages.tasks.segmentation.outputs import unrle

        assert (unrle(pred["rle"]) == mask).all()
        card = httpx.get(f"{url}/model", timeout=10).json()
        assert card["task"] == "segmentation"
    finally:
        proc.terminate()
        proc.wait(20)


def test_kill_9_and_resume_and_a_fresh_rerun_give_the_same_model(segmentation_project, tmp_path):
    """Train again from scratch (the forced rerun): SIGKILLed after optimiser step 8 (in epoch
    2), resumed from epoch 1's checkpoint; then from scratch uninterrupted: both write the
    fixture's model.pt and metrics bit for bit."""
    import signal

    run = copy_run(segmentation_project, tmp_path / "resume")
    want = {name: (run / name).read_bytes() for name in ("models/model.pt",
                                                          "metrics/train.json")}

    def train(**hooks):
        for path in (run / "models/checkpoints").glob("*.pt"):
            if not hooks.get("keep"):
                path.unlink()
        env = {**os.environ, "PYTHONPATH": str(ROOT),
               **{f"PIPELINE_TEST_{k}": str(v) for k, v in hooks.items() if k != "keep"}}
        return subprocess.run([sys.executable, "-m", "stages.train"], cwd=run, env=env,
                              capture_output=True, text=True)

    killed = train(KILL_AT_STEP=8)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = train(keep=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from models/checkpoints/last.pt" in resumed.stdout
    assert {name: (run / name).read_bytes() for name in want} == want
    fresh = train()
    assert fresh.returncode == 0 and "starting fresh" in fresh.stdout, fresh.stderr
    assert {name: (run / name).read_bytes() for name in want} == want
