"""Width buckets at predict time (issue 20): export.width_buckets on the session's tiny OCR run
(ocr_project) exports a dynamic-width ONNX graph whose parity is checked at every bucket
width, and predict runs each line at its own bucket, agreeing with PyTorch at that width."""
import json

import numpy as np
import pytest
import yaml

from stages.lib.io import StageError, read_csv
from tests.conftest import copy_run, measured, run_stage, run_tool

BUCKETS = [96, 144, 192]


def set_buckets(run, buckets):
    params = yaml.safe_load((run / "params.yaml").read_text())
    params["export"]["width_buckets"] = buckets
    (run / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True))


def expected_bucket(path, height=32, width=192):
    """By hand: the line scaled to the height, the smallest bucket holding it."""
    from PIL import Image

    with Image.open(path) as img:
        scaled = min(round(img.width * height / img.height), width)
    return next(b for b in BUCKETS if b >= scaled)


@pytest.fixture(scope="module")
def bucketed(ocr_project, tmp_path_factory):
    run = copy_run(ocr_project, tmp_path_factory.mktemp("buckets") / "run")
    set_buckets(run, BUCKETS)
    proc = run_stage("export", cwd=run)
    assert proc.returncode == 0, proc.stderr
    return run


def test_export_checks_parity_at_every_bucket_width(bucketed):
    import onnx

    metrics = json.loads((bucketed / "metrics/export.json").read_text())
    assert sorted(metrics["widths"], key=int) == ["96", "144"]  # 192 is the main check
    for width in ("96", "144"):
        assert metrics["widths"][width]["text_agreement"] == 1.0
        assert measured(bucketed)["widths"][width]["max_abs_diff"] <= 1e-3
    proto = onnx.load(str(bucketed / "models/model.onnx"))
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert dims[3].dim_param and not dims[3].dim_value  # a symbolic width
    props = {p.key: json.loads(p.value) for p in proto.metadata_props}
    assert props["width_buckets"] == BUCKETS


def test_predict_runs_each_line_at_its_bucket(bucketed, tmp_path):
    import torch

    from stages.lib.modality.imagecore import load_image, normalize
    from stages.tasks import load_model
    from stages.tasks.common.ctc import greedy

    rows = read_csv(bucketed / "data/split/test.csv")[:30]
    paths = [bucketed / "data/sample" / r["path"] for r in rows]
    buckets = [expected_bucket(p) for p in paths]
    assert len(set(buckets)) >= 2, buckets  # the sample's widths vary
    model, meta = load_model(bucketed / "models/model.pt")
    want = {}
    for path, width in zip(paths, buckets, strict=True):
        cut = load_image(path, [32, 192], 1)[:, :width]
        assert np.array_equal(cut, load_image(path, [32, width], 1))  # cut == fit at the bucket
        with torch.no_grad():
            logits = model.eval()(torch.from_numpy(normalize(cut[None], meta["mean"],
                                                             meta["std"]))).numpy()
        assert logits.shape[1] == width // 4
        want[path.name] = greedy(logits, meta["charset"])[0]
    listing = tmp_path / "lines.txt"
    listing.write_text("".join(f"{p}\n" for p in paths))
    out = tmp_path / "rows.jsonl"
    proc = run_tool("predict", f"@{listing}", "--model", str(bucketed / "models/model.onnx"),
                    "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = {json.loads(line)["path"].split("/")[-1]: json.loads(line)
           for line in out.read_text().splitlines()}
    for name, (text, confidence) in want.items():
        assert got[name]["text"] == text, name
        assert got[name]["confidence"] == pytest.approx(confidence, abs=1e-4), name


def test_bucket_widths_are_checked_against_the_model():
    from stages.export import bucket_widths
    from stages.lib.params import Export
    from stages.tasks.classification import TASK as CLASSIFICATION
    from stages.tasks.ocr import TASK as OCR

    meta = {"image_size": [32, 192], "channels": 1}
    assert bucket_widths(Export(width_buckets=[64, 192]), OCR, meta) == [64]
    assert bucket_widths(Export(), CLASSIFICATION, {"image_size": 64}) == []
    with pytest.raises(StageError, match=r"\[98\] not a multiple of 4"):
        bucket_widths(Export(width_buckets=[98, 192]), OCR, meta)
    with pytest.raises(StageError, match="wider than the trained width 192"):
        bucket_widths(Export(width_buckets=[96, 256]), OCR, meta)
    with pytest.raises(StageError, match="the classification model takes one input width"):
        bucket_widths(Export(width_buckets=[64]), CLASSIFICATION, {"image_size": 64})
    assert "ascending" in Export(width_buckets=[144, 96]).problems()[0]
