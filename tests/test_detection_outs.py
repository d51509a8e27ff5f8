"""Detection (issue 18) outs added after the first version, on the shared tiny run
(detection_project): per-image class counts in metrics/validation.json, and the decoding's
score and NMS thresholds and the letterbox in the ONNX metadata."""
import json
from collections import Counter

import pytest
import yaml

pytestmark = pytest.mark.e2e


def test_validation_counts_images_and_boxes_per_class(detection_project):
    p = detection_project
    names = yaml.safe_load((p / "data/sample/data.yaml").read_text())["names"]
    images, boxes, background = Counter(), Counter(), 0
    for image in sorted((p / "data/sample/images").rglob("*.png")):
        label = p / "data/sample/labels" / image.parent.name / f"{image.stem}.txt"
        ids = [int(line.split()[0]) for line in label.read_text().splitlines() if line.strip()]
        boxes.update(names[i] for i in ids)
        images.update({names[i] for i in ids})
        background += not ids
    assert background > 0 and len(images) == 3  # the sample has both kinds of image
    v = json.loads((p / "metrics/validation.json").read_text())
    assert v["per_class"] == dict(boxes)
    assert v["images_per_class"] == dict(images)
    assert v["boxes"] == sum(boxes.values())
    assert v["background_images"] == background


def test_onnx_metadata_carries_the_decoding_thresholds(detection_project):
    import onnx

    from stages.tasks.detection.boxes import NMS_IOU

    p = detection_project
    params = yaml.safe_load((p / "params.yaml").read_text())
    meta = {m.key: json.loads(m.value) for m in onnx.load(p / "models/model.onnx").metadata_props}
    assert params["export"]["score_threshold"] is None  # null: evaluate's
    assert meta["score_threshold"] == params["evaluate"]["score_threshold"]
    assert meta["nms_iou"] == NMS_IOU
    # the preprocessing a consumer repeats: the input size and the letterbox (prepare's)
    assert meta["image_size"] == 64 and meta["letterbox"] == {"fill": 114, "align": "center"}
    processed = json.loads((p / "data/processed/meta.json").read_text())
    assert processed["letterbox"] == meta["letterbox"]


def test_parity_matches_degenerate_boxes_by_their_corners():
    import numpy as np

    from stages.tasks.detection.boxes import match

    flat = np.array([[10.0, 20.0, 14.0, 20.0, 0.5, 1.0]])  # zero height: IoU 0 with itself
    near = flat + np.array([[0.004, -0.003, 0.0, 0.002, 0.0, 0.0]])
    assert match(flat, near, 0.99) == ([], 2)
    assert match(flat, near, 0.99, corner_tol=0.01) == ([(0, 0)], 0)
    far = flat + np.array([[0.05, 0.0, 0.0, 0.0, 0.0, 0.0]])
    assert match(flat, far, 0.99, corner_tol=0.01) == ([], 2)


def test_train_reruns_and_kill_9_resume_are_bit_identical(detection_project, tmp_path):
    """Two epochs of the tiny run: a second fresh train writes the same model.pt bytes, and so
    does a train killed with SIGKILL in epoch 2 then resumed from epoch 1's checkpoint."""
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT, copy_run

    run = copy_run(detection_project, tmp_path / "resume")
    params = yaml.safe_load((run / "params.yaml").read_text())
    params["train"]["epochs"] = 2
    (run / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    def train(keep=False, **hooks):
        for path in (run / "models/checkpoints").glob("*.pt"):
            if not keep:
                path.unlink()
        env = {**os.environ, "PYTHONPATH": str(ROOT),
               **{f"PIPELINE_TEST_{k}": str(v) for k, v in hooks.items()}}
        proc = subprocess.run([sys.executable, "-m", "stages.train"], cwd=run, env=env,
                              capture_output=True, text=True)
        return proc, (run / "models/model.pt").read_bytes()

    first, want = train()
    assert first.returncode == 0, first.stderr
    again, same = train()
    assert again.returncode == 0 and same == want
    killed, _ = train(KILL_AT_STEP=6)  # 28 train images, batch 8: 4 steps an epoch
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed, got = train(keep=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from models/checkpoints/last.pt" in resumed.stdout
    assert got == want
