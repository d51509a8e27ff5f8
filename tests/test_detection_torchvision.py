"""torchvision's detectors by name (train.model, issue 18), from scratch, on a copy of the
shared tiny detection run (40 images at 64 px): train -> evaluate -> export (parity) ->
predict, through the same stages as centernet_small; plus the wrapper's seams (the targets
inside forward, fixed-size rows out, refused options) without a run."""
import json

import numpy as np
import pytest
import yaml

from tests.conftest import copy_run, run_stage, run_tool

MODELS = ("fasterrcnn_mobilenet_v3_large_320_fpn", "ssdlite320_mobilenet_v3_large")


@pytest.mark.e2e
@pytest.mark.parametrize("name", MODELS)
def test_torchvision_detector_trains_evaluates_and_exports(detection_project, tmp_path, name):
    import onnx

    run = copy_run(detection_project, tmp_path / "run")
    params = yaml.safe_load((run / "params.yaml").read_text())
    params["train"]["model"] = name
    # low enough that the parity gate has detections to match (a 1-epoch model's scores)
    params["export"]["score_threshold"] = 0.05
    # Without the zoom-out: trained on shrunk copies for one epoch, faster R-CNN's class scores
    # come out of its biases, equal to 1e-7 across neighbouring proposals, so which proposal
    # survives NMS in PyTorch and in onnxruntime is decided by rounding, not by the export.
    params["train"]["aug_zoom_out"] = 1.0
    (run / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for stage in ("train", "evaluate", "export"):
        proc = run_stage(stage, cwd=run)
        assert proc.returncode == 0, f"{stage}: {proc.stdout[-2000:]} {proc.stderr[-4000:]}"
    ev = json.loads((run / "metrics/eval.json").read_text())
    assert {"map", "map50", "per_class_ap"} <= set(ev)
    export = json.loads((run / "metrics/export.json").read_text())
    assert export["detection_agreement"] == 1.0 and export["samples"] == 6
    proto = onnx.load(run / "models/model.onnx")
    meta = {m.key: json.loads(m.value) for m in proto.metadata_props}
    assert meta["score_threshold"] == 0.05 and meta["letterbox"]["fill"] == 114
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 1  # fixed batch
    # predict: several images in one batch through the batch-1 graph, as PyTorch sees them
    images = sorted((run / "data/sample/images/test").glob("*.png"))[:3]
    rows = {}
    for backend, model in (("onnxruntime", "models/model.onnx"), ("torch", "models/model.pt")):
        out = tmp_path / f"{backend}.jsonl"
        proc = run_tool("predict", *map(str, images), "--out", str(out), "--model",
                        str(run / model), "--backend", backend, "--score-threshold", "0.05",
                        "--batch-size", "3", cwd=run)
        assert proc.returncode == 0, proc.stderr
        rows[backend] = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows["torch"]) == 3 and any(r["boxes"] for r in rows["torch"])
    default = tmp_path / "default.jsonl"  # no --score-threshold: the ONNX metadata's, 0.05
    proc = run_tool("predict", *map(str, images), "--out", str(default), "--model",
                    str(run / "models/model.onnx"), cwd=run)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line) for line in default.read_text().splitlines()] == rows["onnxruntime"]
    for a, b in zip(rows["onnxruntime"], rows["torch"], strict=True):
        # one to one, in any order: an untrained model scores neighbouring anchors alike, and
        # two boxes whose scores tie within float noise may come out in either order
        assert len(a["boxes"]) == len(b["boxes"]), (a, b)
        left = list(b["boxes"])
        for da in a["boxes"]:
            match = [db for db in left if db["label"] == da["label"]
                     and abs(db["score"] - da["score"]) <= 1e-3
                     and all(abs(db[k] - da[k]) <= 0.05 for k in ("x1", "y1", "x2", "y2"))]
            assert match, f"{a['path']}: no PyTorch box matches the onnxruntime box {da}: {b}"
            left.remove(match[0])


@pytest.mark.parametrize("name", [*MODELS, "fcos_resnet50_fpn", "retinanet_resnet50_fpn"])
def test_wrapper_takes_targets_in_train_and_gives_rows_in_eval(name):
    import torch

    from stages.lib.model.formats import export_batch
    from stages.lib.model.models import forward_loss
    from stages.tasks.detection import TASK
    from stages.tasks.detection.model import build_model
    from stages.tasks.detection.torchvision_detectors import PAD_SCORE, TOP_K

    torch.manual_seed(0)
    model = build_model(name, 3, 3, 64)
    x = torch.randn(2, 3, 64, 64)
    y = torch.full((2, 3, 5), -1.0)
    y[0, 0] = torch.tensor([2, 10, 12, 30, 40])  # one box; image 2 is background
    y[0, 1] = torch.tensor([1, 20, 20, 20, 30])  # zero width: left out, not an error
    model.train()
    loss = forward_loss(model, x, y, TASK.loss, None)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    assert any(q.grad is not None and q.grad.abs().sum() > 0 for q in model.parameters())
    model.eval()
    with torch.no_grad():
        rows = model(x)
    assert rows.shape == (2, TOP_K, 6)
    real = rows[..., 4] != PAD_SCORE
    assert ((rows[..., 5][real] >= 0) & (rows[..., 5][real] < 3)).all()  # our class ids
    assert (rows[..., 4][real] >= 0.001).all()
    assert export_batch(model) == 1 and export_batch(build_model(
        "centernet_small", 3, 3, 64)) == 0


def test_unknown_and_grey_models_are_refused_by_name():
    from stages.lib.io import StageError
    from stages.tasks.detection.model import build_model

    with pytest.raises(StageError, match="ssdlite320_mobilenet_v3_large"):
        build_model("yolo_nano", 3, 3, 64)
    with pytest.raises(StageError, match="prepare.channels: 3"):
        build_model("ssdlite320_mobilenet_v3_large", 3, 1, 64)


def test_rows_pad_and_cut_to_top_k():
    import torch

    from stages.tasks.detection.torchvision_detectors import PAD_SCORE, rows

    found = {"boxes": torch.tensor([[1.0, 2, 3, 4], [5, 6, 7, 8]]),
             "scores": torch.tensor([0.9, 0.4]), "labels": torch.tensor([3, 1])}
    out = rows(found, 4)
    assert out[:2].tolist() == [[1, 2, 3, 4, pytest.approx(0.9), 2], [5, 6, 7, 8,
                                                                      pytest.approx(0.4), 0]]
    assert (out[2:, 4] == PAD_SCORE).all()
    assert rows(found, 1).shape == (1, 6)
    assert rows(found, 4, offset=0)[:2, 5].tolist() == [3, 1]  # FCOS, RetinaNet: no background
    empty = {"boxes": torch.zeros(0, 4), "scores": torch.zeros(0),
             "labels": torch.zeros(0, dtype=torch.long)}
    assert (rows(empty, 3)[:, 4] == PAD_SCORE).all()
    assert np.isfinite(rows(empty, 3).numpy()).all()
