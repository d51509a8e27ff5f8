"""Detection (issue 18) outs added after the first version, on the shared tiny run
(detection_project): per-image class counts in metrics/validation.json, and the decoding's
score and NMS thresholds in the ONNX metadata."""
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
    assert meta["score_threshold"] == params["evaluate"]["score_threshold"]
    assert meta["nms_iou"] == NMS_IOU


def test_parity_matches_degenerate_boxes_by_their_corners():
    import numpy as np

    from stages.tasks.detection.boxes import match

    flat = np.array([[10.0, 20.0, 14.0, 20.0, 0.5, 1.0]])  # zero height: IoU 0 with itself
    near = flat + np.array([[0.004, -0.003, 0.0, 0.002, 0.0, 0.0]])
    assert match(flat, near, 0.99) == ([], 2)
    assert match(flat, near, 0.99, corner_tol=0.01) == ([(0, 0)], 0)
    far = flat + np.array([[0.05, 0.0, 0.0, 0.0, 0.0, 0.0]])
    assert match(flat, far, 0.99, corner_tol=0.01) == ([], 2)
