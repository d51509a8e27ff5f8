"""Export models/model.pt to a single-file ONNX model and prove it agrees with PyTorch.

The ONNX graph has a dynamic batch axis (and a dynamic width axis where the task's model takes
any width, Task.dynamic_width), input `input` and the task's outputs (classification:
`logits`). Its metadata (every value JSON-encoded) carries what a consumer needs to feed it:
`task`, the task's keys (classification: `classes`, in output order), `image_size`, `channels`,
`mean`, `std`, and where it came from: `code_sha256`, `manifest_sha256`, `params_sha256`,
`model_sha256`, and the model's version `model_version` (stages/lib/model/provenance.py's
model_version: the string predict, serve and the report show). The git commit is deliberately
NOT in the file (it would change the bytes of a DVC-cached out with every commit, so `dvc
repro` could never reproduce dvc.lock); it goes to the run record logs/export.json.

Parity gate: the test images (or the first `export.parity_samples`) go through PyTorch and
through onnxruntime at batch size 1 and at `export.parity_batch` (with `export.width_buckets`,
again with the images cut or padded to each bucket width). An image fails when its largest
output difference exceeds `atol + rtol * max|PyTorch output|` or the task's decision differs
(classification: the top-1 class); then the stage fails naming the worst image and writes no
model file.

The stage alone lives here; the exporters and the formats' runners are in
stages/lib/model/formats.py,
the gate in stages/lib/model/parity.py, the hashes in stages/lib/model/provenance.py.

Test hooks (stages/lib/hooks.py): EXPORT_MEAN_SHIFT, EXPORT_FORMAT_SHIFT.
"""
import dataclasses
from pathlib import Path

import click

from stages.lib.io import StageError, write_bytes, write_folder, write_json
from stages.lib.params import params_option

MODEL = Path("models/model.pt")
ONNX = Path("models/model.onnx")
METRICS = Path("metrics/export.json")
# onnxruntime's (and OpenVINO's) kernels differ per CPU, so the raw output differences differ in
# their last bits from one machine to the next: they go to the run record (logs/export.json)
# and the console, never into metrics/export.json, which keeps the gate's verdict and tolerance
MEASURED = ("max_abs_diff", "max_rel_diff")


def tracked(metrics):
    """metrics without the machine-dependent MEASURED figures, at every depth."""
    if isinstance(metrics, dict):
        return {k: tracked(v) for k, v in metrics.items() if k not in MEASURED}
    return metrics


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
    trained = task.modality.Spec.from_meta(meta).shape[1]  # the input width it trained at
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


def format_shift(fmt: str) -> float:
    """The EXPORT_FORMAT_SHIFT test hook's input shift for this format (0.0: none)."""
    from stages.lib import hooks

    name, _, shift = hooks.value("EXPORT_FORMAT_SHIFT").partition("=")
    return float(shift) if name == fmt and shift else 0.0


def onnx_extra(p, task, meta) -> dict:
    """The run facts model.onnx's metadata carries besides the task's and the provenance."""
    extra = {"width_buckets": listed_buckets(p, meta)} if task.dynamic_width else {}
    # the kernel profile that trained the model (a model.pt from before profiles: native)
    extra["kernels"] = meta.get("kernels", "native")
    if "trained_on" in meta:  # device, deterministic, precision (a model.pt from before: none)
        extra["trained_on"] = meta["trained_on"]
    return extra


def onnx_parity(p, params, task, model, blob, x, paths, widths, threads):
    """(PyTorch's outputs, metrics, [gate failures]) of model.onnx against PyTorch at batch 1
    and export.parity_batch, and again at each of `widths` (the lines cut or padded to it)."""
    from stages.lib.model.formats import onnx_runner, outputs
    from stages.lib.model.models import predict_outputs
    from stages.lib.model.parity import AtWidth, parity_gate

    batches = sorted({1, p.parity_batch})

    def runs(inputs) -> dict:  # a session per batch size
        return {b: outputs(onnx_runner(blob, threads), inputs, b) for b in batches}

    reference = predict_outputs(model, x, p.parity_batch)
    metrics, error = parity_gate(reference, runs(x), p.atol, p.rtol, paths,
                                 "ONNX (onnxruntime)", task, params)
    errors = [error] if error else []
    if widths:  # the same lines cut or padded to each bucket width, PyTorch against ONNX
        metrics["widths"] = {}
        for width in widths:
            at = AtWidth(x, width)
            at_metrics, at_error = parity_gate(
                predict_outputs(model, at, p.parity_batch), runs(at), p.atol, p.rtol, paths,
                f"ONNX (onnxruntime) at width {width}", task, params)
            metrics["widths"][str(width)] = at_metrics
            errors += [at_error] if at_error else []
    return reference, metrics, errors


def torchscript_parity(p, params, task, exported, meta, reference, x, paths):
    """(TorchScript bytes, metrics, [gate failures]) of the traced model against PyTorch."""
    from stages.lib.model.formats import torchscript_bytes, torchscript_module
    from stages.lib.model.models import predict_outputs
    from stages.lib.model.parity import parity_gate

    blob = torchscript_bytes(exported, meta, task)
    runs = {b: predict_outputs(torchscript_module(blob), x, b)  # a module per batch size
            for b in sorted({1, p.parity_batch})}
    metrics, error = parity_gate(reference, runs, p.atol, p.rtol, paths, "TorchScript", task,
                                 params)
    return blob, metrics, [error] if error else []


def other_formats(p, params, task, model, meta, blob, x, paths):
    """({metrics/export.json keys}, [gate failures], {format: {file: bytes}}, [summaries]) of
    export.formats besides ONNX.

    Every model's headline metric (the task's, on the whole test split, through the task's own
    evaluate()) is compared with PyTorch's: a drop over export.max_metric_drop fails the
    format, naming the image it most likely comes from. OpenVINO must also match onnxruntime
    within export.atol/rtol at batch 1 and export.parity_batch; int8 and TensorRT (FP16) move
    outputs by design, so their output differences are recorded, not gated."""
    from stages.lib.model import formats
    from stages.lib.model.models import predict_outputs
    from stages.lib.model.parity import parity_gate, worst_image
    from stages.lib.data.shards import samples_view, load_split

    evaluate_p = params["evaluate"]
    _, y, _ = load_split("test")
    y, images, name = y[:], samples_view("test"), task.headline_metric
    higher = task.headline_higher_is_better

    def score(outputs) -> float:
        return float(task.evaluate(outputs, y, paths, images, meta, evaluate_p)[0][name])

    def drop(value: float) -> float:
        return round(value - pytorch if not higher else pytorch - value, 12)

    x_parity = x.head(p.parity_samples)
    n_parity, batches = len(x_parity), sorted({1, p.parity_batch})
    torch_out = predict_outputs(model, x, p.parity_batch)
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
            seed = params["train"].seed
            calibration = train_x[formats.calibration_indices(len(train_x),
                                                              p.calibration_samples, seed)]
        made = formats.convert(fmt, source, calibration=calibration, max_batch=p.parity_batch)
        run = formats.runner(fmt, made)
        full = formats.outputs(run, x, p.parity_batch)
        runs = {b: full[:n_parity] if b == p.parity_batch else formats.outputs(run, x_parity, b)
                for b in batches}
        parity, error = parity_gate(onnx_out[:n_parity], runs, p.atol, p.rtol, paths, what,
                                    task, params, against="ONNX (onnxruntime)")
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

@click.command()
@params_option
def main(params_path):
    """Write models/model.onnx and metrics/export.json; fail when ONNX disagrees with PyTorch.

    Reads `task`, `export.*` and (with formats beyond onnx) `evaluate.*` and `train.seed` from
    the params file. With `export.torchscript: true` it also writes models/torchscript/model.pt
    behind the same gate. `export.formats` adds models/openvino/, models/int8/ and
    models/tensorrt/, each behind its gate (stages/lib/model/formats.py). Every such folder is
    always
    written, holding only DISABLED.txt when its format is off, so DVC's outs stay the same and
    DVC has no empty folder to warn about.
    """
    from stages.tasks import load_model, open_stage

    task, params, _ = open_stage("export", params_path)  # first: params that do not fit stop
    p = params["export"]
    from stages.lib.train.kernels import use_trained

    kernels = use_trained(params["train"], click.echo)  # before torch loads: the model's kernels
    from stages.lib.train.cores import stage_threads
    from stages.lib.model.formats import FOLDERS, NOTE, disabled_note, export_batch, onnx_bytes
    from stages.lib.model.provenance import export_provenance, run_record, write_run_record
    from stages.lib.data.shards import load_test

    # onnxruntime's share under `dvc queue start -j N` (and torch's, unless train.threads fixes
    # it); alone: 0, unchanged
    threads = stage_threads(not kernels["threads_fixed"])
    model, meta = load_model(MODEL)
    x_test, _, test_paths = load_test()
    x, paths = x_test, test_paths
    if p.parity_samples:
        x, paths = x.head(p.parity_samples), paths[:p.parity_samples]  # still a lazy view
    exported = with_test_hook(model)
    others = [f for f in p.formats if f != "onnx"] + (["torchscript"] if p.torchscript else [])
    if export_batch(model) and others:
        raise StageError(f"export: {meta['model']} exports only to ONNX, traced at a fixed "
                         f"batch size ({', '.join(others)} not supported for it); set "
                         f"export.formats: [onnx] and export.torchscript: false.")
    origin = export_provenance(params, task.name, MODEL)
    widths = bucket_widths(p, task, meta)
    metadata = {**task.export_metadata(params), **origin,
                **onnx_extra(p, task, meta)}
    blob = onnx_bytes(exported, meta, task, metadata)
    reference, metrics, errors = onnx_parity(p, params, task, model, blob, x, paths,
                                             widths, threads)
    metrics.update(atol=p.atol, rtol=p.rtol, torchscript={"enabled": p.torchscript})
    files, notes = {}, []
    if p.torchscript:
        ts_blob, ts_metrics, ts_errors = torchscript_parity(p, params, task, exported,
                                                            meta, reference, x, paths)
        files["torchscript"] = {"model.pt": ts_blob}
        metrics["torchscript"].update(ts_metrics)
        errors += ts_errors
    if [f for f in p.formats if f != "onnx"] and not errors:
        extra, format_errors, made, notes = other_formats(p, params, task, model,
                                                          meta, blob, x_test, test_paths)
        files.update(made)
        metrics.update(extra)
        errors += format_errors
    write_json(METRICS, {**tracked(metrics), "parity": "failed" if errors else "passed"})
    write_run_record("export", {**run_record("export", p), "provenance": origin,
                                "kernels": kernels, "metrics": metrics, "passed": not errors})
    if errors:
        raise StageError(" ".join(errors) + f" {ONNX} and the other formats were not written.")
    write_bytes(ONNX, blob)
    for fmt, folder in FOLDERS.items():
        write_folder(folder, files.get(fmt) or {NOTE: disabled_note(fmt)})
    click.echo(f"export: {ONNX} ({len(blob)} bytes); batch sizes {metrics['batch_sizes']}: "
               f"max |diff| {metrics['max_abs_diff']:.2e}, "
               f"{task.agreement_name.replace('_', ' ')} {metrics[task.agreement_name]:.3f} "
               f"on {len(x)} {task.modality.WORDS['items']}"
               + (f"; also {FOLDERS['torchscript'] / 'model.pt'}" if p.torchscript else ""))
    for note in notes:
        click.echo(f"export: {note}")


if __name__ == "__main__":
    main()
