"""Export models/model.pt to a single-file ONNX model and prove it agrees with PyTorch.

The ONNX graph has a dynamic batch axis, input `input` and the task's outputs (classification:
`logits`). Its metadata (every value JSON-encoded) carries what a consumer needs to feed it:
`task`, the task's keys (classification: `classes`, in output order), `image_size`, `channels`,
`mean`, `std`, and where it came from: `code_sha256`,
`manifest_sha256`, `params_sha256`, `model_sha256`. The git commit is deliberately NOT in the
file (it would change the bytes of a DVC-cached out with every commit, so `dvc repro` could never
reproduce dvc.lock); it goes to the run record logs/export.json.

Parity gate: the test images (or the first `export.parity_samples`) go through PyTorch and
through onnxruntime at batch size 1 and at `export.parity_batch`. An image fails when its largest
output difference exceeds `atol + rtol * max|PyTorch output|` or the task's decision differs
(classification: the top-1 class); then the stage fails naming the worst image and writes no
model file.

Test hook (stages/lib/hooks.py): EXPORT_MEAN_SHIFT.
"""
import json
from pathlib import Path

import click

from stages.lib.io import StageError, read_csv, write_bytes, write_json
from stages.lib.onnx_clean import strip_source_paths, strip_torchscript_debug
from stages.lib.params import load, params_option, task_name

MODEL = Path("models/model.pt")
ONNX = Path("models/model.onnx")
TORCHSCRIPT_DIR = Path("models/torchscript")
TORCHSCRIPT = TORCHSCRIPT_DIR / "model.pt"
METRICS = Path("metrics/export.json")
TEST_SPLIT = Path("data/split/test.csv")
MANIFEST = Path("data/manifest.csv")
# The code that decides the exported bytes: all of it is a dep of the stage in dvc.yaml, so
# the hash in the metadata is the hash `dvc repro` would reproduce.
CODE_FILES = ("stages/export.py", "stages/lib/hooks.py", "stages/lib/images.py",
              "stages/lib/models.py", "stages/lib/onnx_clean.py", "stages/lib/provenance.py")
# The params that shaped the model (data, split, preprocessing, training) and its export.
PROVENANCE_PARAMS = ("data", "split", "prepare", "train", "export")
PREPROCESSING_KEYS = ("image_size", "channels", "mean", "std")


def provenance(params_path, task) -> dict:
    """Deterministic hashes of the code, data manifest, params and weights behind the export."""
    import hashlib

    from stages.lib.provenance import file_sha256, params_hash
    from stages.tasks import code_files

    code = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent
    task_code = [f.relative_to(root).as_posix() for f in code_files(task)]
    for path in sorted([*CODE_FILES, *task_code]):
        code.update(f"{path}\0{file_sha256(path)}\n".encode())
    params = {s: params_hash(load(s, params_path)) for s in PROVENANCE_PARAMS}
    params["task"] = params_hash({"task": task_name(params_path)})
    return {"code_sha256": code.hexdigest(), "manifest_sha256": file_sha256(MANIFEST),
            "params_sha256": params_hash(params), "model_sha256": file_sha256(MODEL)}


def with_test_hook(model):
    """The model to export: unchanged unless the parity-breaking test hook is set."""
    from stages.lib import hooks

    shift = hooks.value("EXPORT_MEAN_SHIFT")
    if not shift:
        return model
    from torch import nn

    class ShiftInput(nn.Module):
        def forward(self, x):
            return x + float(shift)

    return nn.Sequential(ShiftInput(), model).eval()


def onnx_bytes(model, meta, task, extra_metadata: dict | None = None) -> bytes:
    """Export to ONNX in memory; metadata holds everything a consumer needs to preprocess."""
    import tempfile
    import warnings

    import onnx
    import torch

    from stages.lib.images import input_hw

    example = torch.zeros(2, meta["channels"], *input_hw(meta["image_size"]))
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = Path(tmp) / "model.onnx"
        torch.onnx.export(model.eval(), (example,), str(path), input_names=["input"],
                          output_names=list(task.output_names), external_data=False,
                          verbose=False,
                          dynamic_shapes=({0: torch.export.Dim("batch")},))
        proto = onnx.load(str(path))
    strip_source_paths(proto)  # no absolute paths: the same bytes from any folder or venv
    keys = (*task.meta_keys, *PREPROCESSING_KEYS)
    metadata = {**{k: meta[k] for k in keys}, "task": task.name, **(extra_metadata or {})}
    for key in sorted(metadata):
        proto.metadata_props.add(key=key, value=json.dumps(metadata[key]))
    try:
        onnx.checker.check_model(proto, full_check=True)
    except onnx.checker.ValidationError as exc:
        raise StageError(f"export: the ONNX model fails onnx.checker: {exc}") from None
    return proto.SerializeToString()


def onnx_logits(blob: bytes, x, batch_size: int):
    """onnxruntime's first output of a normalised float32 batch, batch_size images at a time."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    first = session.get_outputs()[0].name
    return np.concatenate([session.run([first], {"input": x[i:i + batch_size]})[0]
                           for i in range(0, len(x), batch_size)])


def torchscript_bytes(model, meta, task) -> bytes:
    """A traced TorchScript module with the same preprocessing metadata as extra files."""
    import io
    import warnings

    import torch

    from stages.lib.images import input_hw

    example = torch.zeros(2, meta["channels"], *input_hw(meta["image_size"]))
    buf = io.BytesIO()
    extra = {k: json.dumps(meta[k]) for k in (*task.meta_keys, *PREPROCESSING_KEYS)}
    # Deterministic per process (the stage exports once); TorchScript's deprecation is silenced.
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(model.eval(), example), buf, _extra_files=extra)
    return strip_torchscript_debug(buf.getvalue())  # no absolute paths either


def torchscript_logits(blob: bytes, x, batch_size: int):
    import io

    import numpy as np
    import torch

    module = torch.jit.load(io.BytesIO(blob), map_location="cpu")
    with torch.no_grad():  # one module, fed batch_size images at a time
        return np.concatenate([module(torch.from_numpy(x[i:i + batch_size])).numpy()
                               for i in range(0, len(x), batch_size)])


def compare(reference, candidate, atol: float, rtol: float, task) -> dict:
    """Per-image comparison of two N x ... output arrays (numpy arrays of length N).

    abs: max |candidate - reference|; rel: abs / max |reference|; excess: abs beyond the
    tolerance atol + rtol * max |reference| (> 0 fails); agree: the task's decision agrees.
    """
    import numpy as np

    n = len(reference)
    diff = np.abs(candidate.astype(np.float64) - reference).reshape(n, -1)
    abs_diff = diff.max(axis=1)
    scale = np.abs(reference.astype(np.float64)).reshape(n, -1).max(axis=1)
    return {"abs": abs_diff, "rel": abs_diff / np.maximum(scale, np.finfo(np.float64).tiny),
            "excess": abs_diff - (atol + rtol * scale),
            "agree": task.agree(reference, candidate)}


def parity_gate(reference, runs: dict, atol: float, rtol: float, paths, what: str, task):
    """(metrics, error message or "") comparing PyTorch outputs with each batch size's run."""
    import numpy as np

    per_batch = {b: compare(reference, out, atol, rtol, task) for b, out in sorted(runs.items())}
    abs_diff = np.max([c["abs"] for c in per_batch.values()], axis=0)
    rel_diff = np.max([c["rel"] for c in per_batch.values()], axis=0)
    excess = np.max([c["excess"] for c in per_batch.values()], axis=0)
    agree = np.all([c["agree"] for c in per_batch.values()], axis=0)
    metrics = {"max_abs_diff": float(abs_diff.max()), "max_rel_diff": float(rel_diff.max()),
               task.agreement_name: float(agree.mean()), "batch_sizes": sorted(runs),
               "samples": len(reference)}
    failing = (excess > 0) | ~agree
    if not failing.any():
        return metrics, ""
    # The worst image: a top-1 disagreement beats any logit difference; then the largest excess.
    worst = int(np.lexsort((-excess, agree))[0])
    batch = max(per_batch, key=lambda b: per_batch[b]["excess"][worst])
    decision = task.describe(reference[worst])
    decisions = (f"; {decision} in PyTorch vs {task.describe(runs[batch][worst])} in {what}"
                 if decision else "")
    return metrics, (
        f"export: {what} disagrees with PyTorch on {int(failing.sum())} of {len(failing)} test "
        f"images. Worst image: {paths[worst]} (batch size {batch}: max |output diff| "
        f"{abs_diff[worst]:.3g}, allowed {abs_diff[worst] - excess[worst]:.3g} = export.atol "
        f"{atol:g} + export.rtol {rtol:g} * max|output|{decisions}). "
        f"A preprocessing or normalisation mismatch between the exported graph and the model "
        f"is the usual cause.")


@click.command()
@params_option
def main(params_path):
    """Write models/model.onnx and metrics/export.json; fail when ONNX disagrees with PyTorch.

    Reads `task` and `export.{atol,rtol,parity_samples,parity_batch,torchscript}` from the
    params file. With `export.torchscript: true` it also writes models/torchscript/model.pt
    behind the same gate (the folder is always written, empty when disabled, so DVC's outs stay
    the same).
    """
    p = load("export", params_path)
    from stages.lib.images import load_processed
    from stages.lib.models import load_model, predict_logits
    from stages.lib.provenance import run_record, write_run_record
    from stages.tasks import current

    task = current(params_path)

    model, meta = load_model(MODEL)
    x, _, _ = load_processed("test")
    paths = [r["path"] for r in read_csv(TEST_SPLIT)]
    if len(paths) != len(x) or not len(x):
        raise StageError(f"{TEST_SPLIT} lists {len(paths)} images but data/processed holds "
                         f"{len(x)} test images: run `dvc repro` to rebuild them.")
    if p.parity_samples:
        x, paths = x.head(p.parity_samples), paths[:p.parity_samples]  # still a lazy view
    exported = with_test_hook(model)
    origin = provenance(params_path, task)
    blob = onnx_bytes(exported, meta, task, origin)
    reference = predict_logits(model, x, p.parity_batch)
    batches = sorted({1, p.parity_batch})
    metrics, error = parity_gate(reference, {b: onnx_logits(blob, x, b) for b in batches},
                                 p.atol, p.rtol, paths, "ONNX (onnxruntime)", task)
    metrics.update(atol=p.atol, rtol=p.rtol, torchscript={"enabled": p.torchscript})
    ts_blob = b""
    if p.torchscript:
        ts_blob = torchscript_bytes(exported, meta, task)
        ts_metrics, ts_error = parity_gate(
            reference, {b: torchscript_logits(ts_blob, x, b) for b in batches},
            p.atol, p.rtol, paths, "TorchScript", task)
        metrics["torchscript"].update(ts_metrics)
        error = error or ts_error
    write_json(METRICS, metrics)
    write_run_record("export", {**run_record("export", p), "provenance": origin,
                                "metrics": metrics, "passed": not error})
    if error:
        raise StageError(f"{error} {ONNX} was not written.")
    write_bytes(ONNX, blob)
    TORCHSCRIPT_DIR.mkdir(parents=True, exist_ok=True)
    if ts_blob:
        write_bytes(TORCHSCRIPT, ts_blob)
    else:
        TORCHSCRIPT.unlink(missing_ok=True)
    click.echo(f"export: {ONNX} ({len(blob)} bytes); batch sizes {batches}: max |diff| "
               f"{metrics['max_abs_diff']:.2e}, {task.agreement_name.replace('_', ' ')} "
               f"{metrics[task.agreement_name]:.3f} "
               f"on {len(x)} images" + (f"; also {TORCHSCRIPT}" if ts_blob else ""))


if __name__ == "__main__":
    main()
