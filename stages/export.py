"""Export models/model.pt to a single-file ONNX model and prove it agrees with PyTorch.

The ONNX graph has a dynamic batch axis (and a dynamic width axis where the task's model takes
any width, Task.dynamic_width), input `input` and the task's outputs (classification:
`logits`). Its metadata (every value JSON-encoded) carries what a consumer needs to feed it:
`task`, the task's keys (classification: `classes`, in output order), `image_size`, `channels`,
`mean`, `std`, and where it came from: `code_sha256`,
`manifest_sha256`, `params_sha256`, `model_sha256`. The git commit is deliberately NOT in the
file (it would change the bytes of a DVC-cached out with every commit, so `dvc repro` could never
reproduce dvc.lock); it goes to the run record logs/export.json.

Parity gate: the test images (or the first `export.parity_samples`) go through PyTorch and
through onnxruntime at batch size 1 and at `export.parity_batch` (with `export.width_buckets`,
again with the images cut or padded to each bucket width). An image fails when its largest
output difference exceeds `atol + rtol * max|PyTorch output|` or the task's decision differs
(classification: the top-1 class); then the stage fails naming the worst image and writes no
model file.

Test hook (stages/lib/hooks.py): EXPORT_MEAN_SHIFT.
"""
import dataclasses
import json
from pathlib import Path

import click

from stages.lib.io import StageError, read_csv, scratch_dir, write_bytes, write_json
from stages.lib.onnx_clean import strip_source_paths, strip_torchscript_debug
from stages.lib.params import load, params_option, task_name, without_placement

MODEL = Path("models/model.pt")
ONNX = Path("models/model.onnx")
TORCHSCRIPT_DIR = Path("models/torchscript")
TORCHSCRIPT = TORCHSCRIPT_DIR / "model.pt"
TORCHSCRIPT_NOTE = TORCHSCRIPT_DIR / "DISABLED.txt"
METRICS = Path("metrics/export.json")
TEST_SPLIT = Path("data/split/test.csv")
MANIFEST = Path("data/manifest.csv")
# The code that decides the exported bytes: all of it is a dep of the stage in dvc.yaml, so
# the hash in the metadata is the hash `dvc repro` would reproduce.
CODE_FILES = ("stages/export.py", "stages/lib/hooks.py", "stages/lib/kernels.py",
              "stages/lib/modality/__init__.py", "stages/lib/modality/image.py",
              "stages/lib/modality/imagecore.py", "stages/lib/models.py",
              "stages/lib/onnx_clean.py", "stages/lib/provenance.py")
# onnxruntime's (and OpenVINO's) kernels differ per CPU, so the raw output differences differ in
# their last bits from one machine to the next: they go to the run record (logs/export.json)
# and the console, never into metrics/export.json, which keeps the gate's verdict and tolerance
MEASURED = ("max_abs_diff", "max_rel_diff")
# The params that shaped the model (data, split, preprocessing, training) and its export.
PROVENANCE_PARAMS = ("data", "split", "prepare", "train", "export")
PREPROCESSING_KEYS = ("image_size", "channels", "mean", "std")


def letterbox_key(meta) -> tuple:
    """("letterbox",) when the model records prepare.letterbox (detection always; any task
    where it is on): {"fill": 114, "align": "center"} or false. Absent: a squash resize."""
    return ("letterbox",) if "letterbox" in meta else ()


TRACED_OPSET = 17  # a model exported by tracing (Task.export_batch): RoIAlign needs >= 16
# The knobs of the other formats never change model.onnx: they stay out of its params hash, so
# selecting a format leaves model.onnx's bytes as they were.
FORMAT_KEYS = ("formats", "max_metric_drop", "calibration_samples")


def tracked(metrics):
    """metrics without the machine-dependent MEASURED figures, at every depth."""
    if isinstance(metrics, dict):
        return {k: tracked(v) for k, v in metrics.items() if k not in MEASURED}
    return metrics


def provenance(params_path, task) -> dict:
    """Deterministic hashes of the code, data manifest, params and weights behind the export."""
    import dataclasses
    import hashlib

    from stages.lib.io import sha256_file
    from stages.lib.provenance import params_hash
    from stages.tasks import code_files

    code = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent
    task_code = [f.relative_to(root).as_posix() for f in code_files(task)]
    for path in sorted([*CODE_FILES, *task_code]):
        code.update(f"{path}\0{sha256_file(path, missing='')}\n".encode())
    # prepare's placement keys (workers, engine, ray_address) are not part of the result
    sections = {s: without_placement(s, dataclasses.asdict(load(s, params_path)))
                for s in PROVENANCE_PARAMS}
    for key in FORMAT_KEYS:
        del sections["export"][key]
    if not sections["export"]["width_buckets"]:  # the default: hashed as before it existed
        del sections["export"]["width_buckets"]
    if not sections["prepare"]["width_buckets"]:
        del sections["prepare"]["width_buckets"]
    if sections["prepare"]["letterbox"] == "auto":  # the default: hashed as before it existed
        del sections["prepare"]["letterbox"]
    if sections["export"]["score_threshold"] is None:  # the default (evaluate's): likewise
        del sections["export"]["score_threshold"]
    params = {s: params_hash(values) for s, values in sections.items()}
    params["task"] = params_hash({"task": task_name(params_path)})
    return {"code_sha256": code.hexdigest(),
            "manifest_sha256": sha256_file(MANIFEST, missing=""),
            "params_sha256": params_hash(params), "model_sha256": sha256_file(MODEL, missing="")}


class AtWidth:
    """A normalised N x C x H x W view of lines at another width: cut at the right, or padded
    with copies of the last column (the paper a line is padded with), batch by batch."""

    def __init__(self, x, width: int):
        self.x, self.width = x, width

    def __len__(self):
        return len(self.x)

    def __getitem__(self, key):
        import numpy as np

        batch = self.x[key]
        have = batch.shape[-1]
        if have >= self.width:
            return np.ascontiguousarray(batch[..., :self.width])
        return np.ascontiguousarray(np.pad(batch, [(0, 0)] * (batch.ndim - 1)
                                           + [(0, self.width - have)], mode="edge"))


def listed_buckets(p, meta) -> list[int]:
    """export.width_buckets, or when empty the buckets prepare.width_buckets trained with
    (the model's width_buckets, from meta.json, the trained width last): one list drives
    prepare, train, evaluate, export, predict and serve unless export names its own."""
    return list(p.width_buckets or meta.get("width_buckets", []))


def bucket_widths(p, task, meta) -> list[int]:
    """export.width_buckets (or prepare's) other than the trained width, checked against the
    task's model."""
    p = dataclasses.replace(p, width_buckets=listed_buckets(p, meta))
    if not p.width_buckets:
        return []
    if not task.dynamic_width:
        raise StageError(f"export.width_buckets: the {task.name} model takes one input width "
                         f"(prepare's); leave export.width_buckets empty.")
    odd = [w for w in p.width_buckets if w % task.dynamic_width]
    if odd:
        raise StageError(f"export.width_buckets: {odd} not a multiple of "
                         f"{task.dynamic_width}, the model's stride; e.g. "
                         f"{[w - w % task.dynamic_width or task.dynamic_width for w in odd]}")
    trained = task.modality.bucket_width(meta["image_size"], [], None)  # no buckets: its own
    if p.width_buckets[-1] > trained:
        raise StageError(f"export.width_buckets: {p.width_buckets[-1]} is wider than the "
                         f"trained width {trained} (prepare.width): predict and serve fit a "
                         f"line to the trained width, then cut it to its bucket.")
    return [w for w in p.width_buckets if w != trained]


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
    import warnings

    import onnx
    import torch

    example = torch.zeros(2, *task.modality.input_spec(meta))
    axes = {0: torch.export.Dim("batch")}
    if task.dynamic_width:  # any width that is a multiple of the task's stride
        axes[3] = task.dynamic_width * torch.export.Dim("width", min=1)
    fixed = task.export_batch(model)
    # the exporter writes only to a file: one in a scratch folder (a full TMPDIR: one line)
    with scratch_dir("export: the ONNX export") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = tmp / "model.onnx"
        if fixed:  # traced (torchvision's detectors): a seeded example, so it finds boxes
            example = torch.randn(fixed, *example.shape[1:],
                                  generator=torch.Generator().manual_seed(0))
            torch.onnx.export(model.eval(), (example,), str(path), input_names=["input"],
                              output_names=list(task.output_names), external_data=False,
                              verbose=False, dynamo=False, opset_version=TRACED_OPSET)
        else:
            torch.onnx.export(model.eval(), (example,), str(path), input_names=["input"],
                              output_names=list(task.output_names), external_data=False,
                              verbose=False, dynamic_shapes=(axes,))
        proto = onnx.load(str(path))
    strip_source_paths(proto)  # no absolute paths: the same bytes from any folder or venv
    keys = (*task.meta_keys, *PREPROCESSING_KEYS, *letterbox_key(meta))
    metadata = {**{k: meta[k] for k in keys}, "task": task.name, **(extra_metadata or {})}
    for key in sorted(metadata):
        proto.metadata_props.add(key=key, value=json.dumps(metadata[key]))
    try:
        onnx.checker.check_model(proto, full_check=True)
    except onnx.checker.ValidationError as exc:
        raise StageError(f"export: the ONNX model fails onnx.checker: {exc}") from None
    return proto.SerializeToString()


def onnx_logits(blob: bytes, x, batch_size: int, threads: int = 0):
    """onnxruntime's first output of a normalised float32 batch, batch_size images at a time
    (threads: its intra-op pool; 0 = onnxruntime's default)."""
    import numpy as np
    from stages.lib.formats import onnx_runner

    run = onnx_runner(blob, threads)
    return np.concatenate([run(x[i:i + batch_size]) for i in range(0, len(x), batch_size)])


def torchscript_bytes(model, meta, task) -> bytes:
    """A traced TorchScript module with the same preprocessing metadata as extra files."""
    import io
    import warnings

    import torch

    example = torch.zeros(2, *task.modality.input_spec(meta))
    buf = io.BytesIO()
    extra = {k: json.dumps(meta[k])
             for k in (*task.meta_keys, *PREPROCESSING_KEYS, *letterbox_key(meta))}
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


def compare(reference, candidate, atol: float, rtol: float, task, params_path=None) -> dict:
    """Per-image comparison of two N x ... output arrays (numpy arrays of length N).

    abs: max |candidate - reference|; rel: abs / max |reference|; excess: abs beyond the
    tolerance atol + rtol * max |reference| (> 0 fails); agree: the task's decision agrees.
    A task with its own Task.parity decides abs and agree; then only agree fails.
    """
    import numpy as np

    n = len(reference)
    custom = task.parity(reference, candidate, params_path) if params_path else None
    if custom is not None:
        abs_diff, agree = custom
        return {"abs": abs_diff, "rel": abs_diff, "excess": np.where(agree, -1.0, 0.0),
                "agree": agree}
    diff = np.abs(candidate.astype(np.float64) - reference).reshape(n, -1)
    abs_diff = diff.max(axis=1)
    scale = np.abs(reference.astype(np.float64)).reshape(n, -1).max(axis=1)
    return {"abs": abs_diff, "rel": abs_diff / np.maximum(scale, np.finfo(np.float64).tiny),
            "excess": abs_diff - (atol + rtol * scale),
            "agree": task.agree(reference, candidate)}


def parity_gate(reference, runs: dict, atol: float, rtol: float, paths, what: str, task,
                params_path=None, against: str = "PyTorch"):
    """(metrics, error message or "") comparing the reference outputs (`against`: PyTorch's)
    with each batch size's run."""
    import numpy as np

    per_batch = {b: compare(reference, out, atol, rtol, task, params_path)
                 for b, out in sorted(runs.items())}
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
    decisions = (f"; {decision} in {against} vs {task.describe(runs[batch][worst])} in {what}"
                 if decision else "")
    return metrics, (
        f"export: {what} disagrees with {against} on {int(failing.sum())} of {len(failing)} test "
        f"images. Worst image: {paths[worst]} (batch size {batch}: max |output diff| "
        f"{abs_diff[worst]:.3g}, allowed {abs_diff[worst] - excess[worst]:.3g} = export.atol "
        f"{atol:g} + export.rtol {rtol:g} * max|output|{decisions}). "
        f"A preprocessing or normalisation mismatch between the exported graph and the model "
        f"is the usual cause.")


def format_shift(fmt: str) -> float:
    """The EXPORT_FORMAT_SHIFT test hook's input shift for this format (0.0: none)."""
    from stages.lib import hooks

    name, _, shift = hooks.value("EXPORT_FORMAT_SHIFT").partition("=")
    return float(shift) if name == fmt and shift else 0.0


def worst_image(reference, candidate, paths, task, what: str) -> str:
    """The image a metric loss most likely comes from: a changed decision first (the task's
    agree()), then the largest output difference; with both decisions when the task has them."""
    import numpy as np

    n = len(reference)
    diff = np.abs(candidate.astype(np.float64) - reference).reshape(n, -1).max(axis=1)
    agree = task.agree(reference, candidate)
    worst = int(np.lexsort((-diff, agree))[0])
    decision = task.describe(reference[worst])
    decisions = (f"; {decision} in PyTorch vs {task.describe(candidate[worst])} in {what}"
                 if decision else "")
    return (f"{paths[worst]} (max |output diff| {diff[worst]:.3g}{decisions}; "
            f"{int((~agree).sum())} of {n} test images changed decision)")


def other_formats(p, params_path, task, model, meta, blob, x, paths):
    """({metrics/export.json keys}, [gate failures], {format: {file: bytes}}, [summaries]) of
    export.formats besides ONNX.

    Every model's headline metric (the task's, on the whole test split, through the task's own
    evaluate()) is compared with PyTorch's: a drop over export.max_metric_drop fails the
    format, naming the image it most likely comes from. OpenVINO must also match onnxruntime
    within export.atol/rtol at batch 1 and export.parity_batch; int8 and TensorRT (FP16) move
    outputs by design, so their output differences are recorded, not gated."""
    from stages.lib import formats
    from stages.lib.models import predict_logits
    from stages.lib.shards import images_view, load_split

    evaluate_p = load("evaluate", params_path)
    _, y, _ = load_split("test")
    y, images, name = y[:], images_view("test"), task.headline_metric
    higher = task.headline_higher_is_better

    def score(outputs) -> float:
        return float(task.evaluate(outputs, y, paths, images, meta, evaluate_p)[0][name])

    def drop(value: float) -> float:
        return round(value - pytorch if not higher else pytorch - value, 12)

    x_parity = x.head(p.parity_samples)
    n_parity, batches = len(x_parity), sorted({1, p.parity_batch})
    torch_out = predict_logits(model, x, p.parity_batch)
    onnx_out = formats.outputs(formats.onnx_runner(blob), x, p.parity_batch)
    pytorch = score(torch_out)
    headline = {"metric": name, "higher_is_better": higher, "samples": len(x),
                "max_drop": p.max_metric_drop, "value": {"pytorch": pytorch}, "drop": {}}
    out, errors, files, notes = {"headline": headline}, [], {}, []

    def gate(fmt: str, candidate) -> None:
        value = score(candidate)
        headline["value"][fmt], headline["drop"][fmt] = value, drop(value)
        if drop(value) > p.max_metric_drop:
            what = formats.NAMES[fmt]
            errors.append(
                f"export: {what} loses {drop(value):.4g} of the test {name} against PyTorch "
                f"({pytorch:.4f} -> {value:.4f}; export.max_metric_drop {p.max_metric_drop:g})."
                f" Worst image: {worst_image(torch_out, candidate, paths, task, what)}.")

    gate("onnx", onnx_out)
    for fmt in (f for f in p.formats if f != "onnx"):
        what = formats.NAMES[fmt]
        if fmt == "tensorrt" and not formats.cuda_device():
            out[fmt] = formats.NO_CUDA
            notes.append(f"tensorrt {formats.NO_CUDA}")
            continue
        shift = format_shift(fmt)
        source = formats.shifted_onnx(blob, shift) if shift else blob
        calibration = None
        if fmt == "onnx_int8":
            train_x, _, _ = load_split("train")
            seed = load("train", params_path).seed
            calibration = train_x[formats.calibration_indices(len(train_x),
                                                              p.calibration_samples, seed)]
        made = formats.convert(fmt, source, calibration=calibration, max_batch=p.parity_batch)
        run = formats.runner(fmt, made)
        full = formats.outputs(run, x, p.parity_batch)
        runs = {b: full[:n_parity] if b == p.parity_batch else formats.outputs(run, x_parity, b)
                for b in batches}
        parity, error = parity_gate(onnx_out[:n_parity], runs, p.atol, p.rtol, paths, what,
                                    task, params_path, against="ONNX (onnxruntime)")
        size = sum(len(b) for b in made.values())
        out[fmt] = {**parity, "against": "onnxruntime", "bytes": size,
                    "gated_on_outputs": fmt == "openvino"}
        if fmt == "openvino" and error:
            errors.append(error)
        if fmt == "onnx_int8":
            out[fmt].update(size_ratio=round(size / len(blob), 4),
                            calibration_samples=len(calibration))
        gate(fmt, full)
        files[fmt] = made
        notes.append(f"{fmt} {size} bytes, {name} {headline['value'][fmt]:.4f} "
                     f"(PyTorch {pytorch:.4f})")
    return out, errors, files, notes


NOTE = "DISABLED.txt"  # what an unselected format's folder holds (DVC warns on empty outs)


def format_note(fmt: str) -> bytes:
    return (f"{fmt} is not in export.formats (or its device is missing: see metrics/export.json)"
            f", so this folder holds no model; add it to export.formats to export it.\n").encode()


def write_folder(folder: Path, files: dict) -> None:
    """folder holding exactly `files` ({name: bytes}), replaced whole."""
    import shutil

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, data in sorted(files.items()):
        write_bytes(tmp / name, data)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


@click.command()
@params_option
def main(params_path):
    """Write models/model.onnx and metrics/export.json; fail when ONNX disagrees with PyTorch.

    Reads `task`, `export.*` and (with formats beyond onnx) `evaluate.*` and `train.seed` from
    the params file. With `export.torchscript: true` it also writes models/torchscript/model.pt
    behind the same gate. `export.formats` adds models/openvino/, models/int8/ and
    models/tensorrt/, each behind its gate (stages/lib/formats.py). Every such folder is always
    written, holding only DISABLED.txt when its format is off, so DVC's outs stay the same and
    DVC has no empty folder to warn about.
    """
    from stages.tasks import current, load_model

    task = current(params_path)  # first: params that do not fit the task stop here
    p = load("export", params_path)
    from stages.lib.kernels import use_trained

    kernels = use_trained(params_path, click.echo)  # before torch loads: the model's kernels
    from stages.lib.formats import FOLDERS
    from stages.lib.models import predict_logits
    from stages.lib.provenance import run_record, write_run_record
    from stages.lib.shards import load_split

    from stages.lib.cores import stage_threads

    # onnxruntime's share under `dvc queue start -j N` (and torch's, unless train.threads fixes
    # it); alone: 0, unchanged
    threads = stage_threads(not kernels["threads_fixed"])

    model, meta = load_model(MODEL)
    x_test, _, _ = load_split("test")
    test_paths = [r["path"] for r in read_csv(TEST_SPLIT)]
    if len(test_paths) != len(x_test) or not len(x_test):
        raise StageError(f"{TEST_SPLIT} lists {len(test_paths)} images but data/processed "
                         f"holds {len(x_test)} test images: run `dvc repro` to rebuild them.")
    x, paths = x_test, test_paths
    if p.parity_samples:
        x, paths = x.head(p.parity_samples), paths[:p.parity_samples]  # still a lazy view
    exported = with_test_hook(model)
    others = [f for f in p.formats if f != "onnx"] + (["torchscript"] if p.torchscript else [])
    if task.export_batch(model) and others:
        raise StageError(f"export: {meta['model']} exports only to ONNX, traced at a fixed "
                         f"batch size ({', '.join(others)} not supported for it); set "
                         f"export.formats: [onnx] and export.torchscript: false.")
    origin = provenance(params_path, task)
    widths = bucket_widths(p, task, meta)
    extra = {"width_buckets": listed_buckets(p, meta)} if task.dynamic_width else {}
    # the kernel profile that trained the model (a model.pt from before profiles: native)
    extra["kernels"] = meta.get("kernels", "native")
    if "trained_on" in meta:  # device, deterministic, precision (a model.pt from before: none)
        extra["trained_on"] = meta["trained_on"]
    blob = onnx_bytes(exported, meta, task,
                      {**task.export_metadata(params_path), **origin, **extra})
    reference = predict_logits(model, x, p.parity_batch)
    batches = sorted({1, p.parity_batch})
    metrics, error = parity_gate(reference, {b: onnx_logits(blob, x, b, threads) for b in batches},
                                 p.atol, p.rtol, paths, "ONNX (onnxruntime)", task,
                                 params_path)
    errors = [error] if error else []
    if widths:  # the same lines cut or padded to each bucket width, PyTorch against ONNX
        metrics["widths"] = {}
        for width in widths:
            at = AtWidth(x, width)
            at_metrics, at_error = parity_gate(
                predict_logits(model, at, p.parity_batch),
                {b: onnx_logits(blob, at, b, threads) for b in batches}, p.atol, p.rtol, paths,
                f"ONNX (onnxruntime) at width {width}", task, params_path)
            metrics["widths"][str(width)] = at_metrics
            errors += [at_error] if at_error else []
    metrics.update(atol=p.atol, rtol=p.rtol, torchscript={"enabled": p.torchscript})
    ts_blob = b""
    if p.torchscript:
        ts_blob = torchscript_bytes(exported, meta, task)
        ts_metrics, ts_error = parity_gate(
            reference, {b: torchscript_logits(ts_blob, x, b) for b in batches},
            p.atol, p.rtol, paths, "TorchScript", task, params_path)
        metrics["torchscript"].update(ts_metrics)
        errors += [ts_error] if ts_error else []
    files, notes = {}, []
    if [f for f in p.formats if f != "onnx"] and not errors:
        extra, format_errors, files, notes = other_formats(p, params_path, task, model,
                                                           meta, blob, x_test, test_paths)
        metrics.update(extra)
        errors += format_errors
    write_json(METRICS, {**tracked(metrics), "parity": "failed" if errors else "passed"})
    write_run_record("export", {**run_record("export", p), "provenance": origin,
                                "kernels": kernels, "metrics": metrics, "passed": not errors})
    if errors:
        raise StageError(" ".join(errors) + f" {ONNX} and the other formats were not written.")
    write_bytes(ONNX, blob)
    TORCHSCRIPT_DIR.mkdir(parents=True, exist_ok=True)
    if ts_blob:
        write_bytes(TORCHSCRIPT, ts_blob)
        TORCHSCRIPT_NOTE.unlink(missing_ok=True)
    else:
        TORCHSCRIPT.unlink(missing_ok=True)
        # a note, not an empty folder: DVC warns "'models/torchscript' is empty." on every run
        write_bytes(TORCHSCRIPT_NOTE, b"export.torchscript is false, so no TorchScript model "
                                      b"is exported; set it to true for models/torchscript/"
                                      b"model.pt.\n")
    for fmt, folder in FOLDERS.items():
        write_folder(folder, files.get(fmt) or {NOTE: format_note(fmt)})
    click.echo(f"export: {ONNX} ({len(blob)} bytes); batch sizes {batches}: max |diff| "
               f"{metrics['max_abs_diff']:.2e}, {task.agreement_name.replace('_', ' ')} "
               f"{metrics[task.agreement_name]:.3f} "
               f"on {len(x)} images" + (f"; also {TORCHSCRIPT}" if ts_blob else ""))
    for note in notes:
        click.echo(f"export: {note}")


if __name__ == "__main__":
    main()
