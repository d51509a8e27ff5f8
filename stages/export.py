"""Export models/model.pt to a single-file ONNX model and prove it agrees with PyTorch.

The ONNX graph has a dynamic batch axis, input `input` and output `logits`, and carries the
class names and preprocessing in its metadata. The stage fails when any test image's logits
differ between PyTorch and onnxruntime by more than `export.atol`.
"""
import json
from pathlib import Path

import click

from stages.lib.io import StageError, read_csv, write_bytes, write_json
from stages.lib.params import load, params_option

MODEL = Path("models/model.pt")
ONNX = Path("models/model.onnx")
METRICS = Path("metrics/export.json")
TEST_SPLIT = Path("data/split/test.csv")


def onnx_bytes(model, meta) -> bytes:
    """Export to ONNX in memory; metadata holds everything a consumer needs to preprocess."""
    import tempfile
    import warnings

    import onnx
    import torch

    example = torch.zeros(2, meta["channels"], meta["image_size"], meta["image_size"])
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = Path(tmp) / "model.onnx"
        torch.onnx.export(model.eval(), (example,), str(path), input_names=["input"],
                          output_names=["logits"], external_data=False, verbose=False,
                          dynamic_shapes=({0: torch.export.Dim("batch")},))
        proto = onnx.load(str(path))
    for key in ("classes", "image_size", "channels", "mean", "std"):
        proto.metadata_props.add(key=key, value=json.dumps(meta[key]))
    return proto.SerializeToString()


def parity(model, onnx_model: bytes, x) -> tuple[float, int]:
    """(max |torch - onnxruntime| logit difference, index of the worst image)."""
    import numpy as np
    import onnxruntime as ort

    from stages.lib.models import predict_logits

    session = ort.InferenceSession(onnx_model, providers=["CPUExecutionProvider"])
    ort_logits = np.concatenate([session.run(["logits"], {"input": x[i:i + 64]})[0]
                                 for i in range(0, len(x), 64)])
    diff = np.abs(predict_logits(model, x) - ort_logits).max(axis=1)
    worst = int(diff.argmax())
    return float(diff[worst]), worst


@click.command()
@params_option
def main(params_path):
    """Write models/model.onnx and metrics/export.json; fail when ONNX disagrees with PyTorch.

    Reads `export.atol` from the params file.
    """
    p = load("export", params_path)
    from stages.lib.images import load_processed
    from stages.lib.models import load_model

    model, meta = load_model(MODEL)
    x, _, _ = load_processed("test")
    blob = onnx_bytes(model, meta)
    max_diff, worst = parity(model, blob, x)
    paths = [r["path"] for r in read_csv(TEST_SPLIT)]
    write_json(METRICS, {"max_abs_diff": max_diff, "samples": len(x), "atol": p.atol})
    if not max_diff <= p.atol:
        raise StageError(
            f"export: ONNX logits differ from PyTorch by {max_diff:.3g} (> export.atol "
            f"{p.atol:g}); worst image: {paths[worst]}. models/model.onnx was not written.")
    write_bytes(ONNX, blob)
    click.echo(f"export: {ONNX} ({len(blob)} bytes), max |diff| {max_diff:.2e} on {len(x)} images")


if __name__ == "__main__":
    main()
