"""Benchmark the deployment formats: images/s at batch 1 and 64, and each one's test metric.

    python -m bench.deploy [--project DIR] [--threads 2] [--images 2048] [--device cpu|cuda]

Rows: PyTorch eager, onnxruntime fp32 (models/model.onnx), onnxruntime int8
(models/int8/model.int8.onnx) and OpenVINO f32 (models/openvino/model.xml); with --device cuda
also PyTorch eager on the GPU and TensorRT (models/tensorrt/model.engine) when present. Every
row runs the same normalised test images (cycled to --images) with the same thread count, in
this one run, and prints its ratio to onnxruntime fp32 measured beside it: the ratios hold on a
busy machine, the absolute numbers do not. The metric column is the task's headline on the
test split, from the run's metrics/export.json (PyTorch from metrics/eval.json).

Without --project it builds one: a temp copy of this project on the full built-in sample with
`export.formats: [onnx, openvino, onnx_int8]` (plus tensorrt with --device cuda), `dvc repro`.
"""
import json
import os
import tempfile
import time
from pathlib import Path

import click
import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def images_per_s(run, x: np.ndarray, batch_size: int, repeats: int = 3) -> float:
    """Best-of-repeats images/s of run() over x in batches (one warm-up batch first)."""
    run(x[:batch_size])
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(0, len(x), batch_size):
            run(x[i:i + batch_size])
        best = min(best, time.perf_counter() - start)
    return len(x) / best


def build_project(dest: Path, device: str) -> Path:
    from tools.project import copy_project, dvc

    formats = ["onnx", "openvino", "onnx_int8"] + (["tensorrt"] if device == "cuda" else [])
    project = copy_project(ROOT, dest, params={"export.formats": formats})
    click.echo(f"deploy: building the run in {project} (dvc repro, a few minutes) ...",
               err=True)
    dvc(project, "repro")
    return project


def runners(project: Path, threads: int, device: str) -> dict:
    """{row name: run(float32 batch) -> outputs} of every format the run holds."""
    import torch

    from stages.lib.model import formats
    from stages.tasks import load_model

    torch.set_num_threads(threads)
    model, _ = load_model(project / "models/model.pt")

    def eager(x):
        with torch.no_grad():
            return model(torch.from_numpy(x)).numpy()

    rows = {"PyTorch eager": ("pytorch", eager),
            "onnxruntime fp32": ("onnx", formats.onnx_runner(project / "models/model.onnx",
                                                             threads))}
    int8 = project / "models/int8/model.int8.onnx"
    if int8.is_file():
        rows["onnxruntime int8"] = ("onnx_int8", formats.onnx_runner(int8, threads))
    ir = project / "models/openvino/model.xml"
    if ir.is_file():
        rows["OpenVINO f32"] = ("openvino", formats.openvino_runner(ir, threads=threads))
    if device == "cuda":
        gpu = load_model(project / "models/model.pt")[0].to("cuda")  # a copy: eager stays

        def eager_cuda(x):
            with torch.no_grad():
                return gpu(torch.from_numpy(x).to("cuda")).cpu().numpy()

        rows["PyTorch eager (CUDA)"] = ("pytorch", eager_cuda)
        engine = project / "models/tensorrt/model.engine"
        if engine.is_file():
            rows["TensorRT (CUDA)"] = ("tensorrt",
                                       formats.tensorrt_runner(engine.read_bytes()))
    return rows


def metric_of(project: Path) -> tuple[str, dict]:
    """(metric name, {format key: test value}) from the run's metrics."""
    export = json.loads((project / "metrics/export.json").read_text())
    headline = export.get("headline")
    if headline:
        return headline["metric"], headline["value"]
    return "accuracy", {"pytorch": json.loads((project / "metrics/eval.json").read_text())
                        .get("accuracy")}


@click.command()
@click.option("--project", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="A project whose `dvc repro` ran with export.formats; default: build one.")
@click.option("--threads", type=click.IntRange(min=1), default=2, show_default=True,
              help="Threads every CPU runtime gets.")
@click.option("--images", type=click.IntRange(min=64), default=2048, show_default=True,
              help="Test images (cycled) per timed pass.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu",
              show_default=True, help="cuda adds PyTorch on the GPU and TensorRT.")
def main(project, threads, images, device):
    with tempfile.TemporaryDirectory() as tmp:
        project = (project or build_project(Path(tmp) / "project", device)).resolve()
        os.chdir(project)  # data/processed is read relative to the project
        from stages.lib.data.shards import load_split

        x_test, _, _ = load_split("test")
        x = np.ascontiguousarray(x_test[np.arange(images) % len(x_test)], dtype=np.float32)
        rows = runners(project, threads, device)
        name, values = metric_of(project)
        measured = {row: {b: images_per_s(run, x, b) for b in (1, 64)}
                    for row, (_, run) in rows.items()}
    base = measured["onnxruntime fp32"]
    click.echo(f"deploy: {images} test images, {threads} threads, device {device}; images/s "
               f"and the ratio to onnxruntime fp32 measured in this run; {name} on the test "
               f"split")
    click.echo(f"{'format':<22}{'batch 1':>10}{'ratio':>7}{'batch 64':>10}{'ratio':>7}"
               f"{name:>10}")
    for row, (key, _) in rows.items():
        value = values.get(key)
        metric = f"{value:.4f}" if isinstance(value, float) else "-"
        s = measured[row]
        click.echo(f"{row:<22}{s[1]:>10.0f}{s[1] / base[1]:>7.2f}{s[64]:>10.0f}"
                   f"{s[64] / base[64]:>7.2f}{metric:>10}")


if __name__ == "__main__":
    main()
