"""Benchmark inference: onnxruntime vs PyTorch eager, and the HTTP API vs in-process onnxruntime.

    python -m bench.predict [--project DIR] [--images 4000] [--batch-size 64] [--requests 800]

Uses DIR/models/model.onnx and DIR/models/model.pt and the images under DIR/data/sample (or
--images-dir), decoded once and cycled to --images. Without --project it uses this project
when `dvc repro` has built its models, else it trains a small copy in a temp directory first
(20 images per class, 1 epoch: the same architecture, so the same inference cost). Prints
images/s of both backends on the same uint8 batches (preprocessing included, decoding not),
their ratio, and the API's requests/s and p50/p99 latency with --concurrency clients posting
one image each, as a ratio to in-process onnxruntime throughput. Every figure is measured in
the same run, so the ratios hold even on a busy machine; the absolute numbers do not.
"""
import os
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click
import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def throughput(model, images: np.ndarray, batch_size: int, repeats: int = 3) -> float:
    """Best-of-repeats images/s of model.logits over all images in batches."""
    model.logits(images[:batch_size])  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(0, len(images), batch_size):
            model.logits(images[i:i + batch_size])
        best = min(best, time.perf_counter() - start)
    return len(images) / best


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_api(model_path: Path, files: list[Path], requests: int, concurrency: int) -> dict:
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "tools.serve", "--model", str(model_path),
                             "--port", str(port), "--log-level", "warning"], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise click.ClickException("the API server exited before it was ready")
            try:
                if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise click.ClickException("the API server was not ready within 120 s")
            time.sleep(0.2)
        payloads = [(f.name, f.read_bytes()) for f in files]
        with httpx.Client(base_url=url, timeout=60,
                          limits=httpx.Limits(max_connections=concurrency)) as client:
            def one(i):
                start = time.perf_counter()
                response = client.post("/predict", files={"files": payloads[i % len(payloads)]})
                response.raise_for_status()
                return time.perf_counter() - start

            with ThreadPoolExecutor(concurrency) as pool:  # warm-up: connections, first batches
                list(pool.map(one, range(concurrency * 4)))
                start = time.perf_counter()
                latencies = sorted(pool.map(one, range(requests)))
                seconds = time.perf_counter() - start
            serving = client.get("/model").json()["serving"]
    finally:
        proc.terminate()
        proc.wait(20)
    return {"requests_per_s": requests / seconds,
            "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "images_per_batch": serving["images"] / max(1, serving["batches"])}


@click.command()
@click.option("--project", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Project whose models/ were built by `dvc repro`.  [default: this one, or "
                   "a small trained copy when this one has no models]")
@click.option("--images-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Images to use.  [default: PROJECT/data/sample]")
@click.option("--images", "count", default=4000, show_default=True,
              help="Images per timed pass (the files are cycled).")
@click.option("--batch-size", default=64, show_default=True, help="Batch size of both backends.")
@click.option("--requests", default=800, show_default=True, help="API requests timed.")
@click.option("--concurrency", default=16, show_default=True, help="Concurrent API clients.")
def main(project, images_dir, count, batch_size, requests, concurrency):
    """Print images/s of onnxruntime and PyTorch eager, and the API's requests/s and latency."""
    import tempfile

    from stages.lib.modality.imageserve import read as read_image
    from tools.inference import load
    from tools.predict.inputs import walk

    scratch = tempfile.TemporaryDirectory()
    if project is None:
        project = ROOT
        if not (ROOT / "models/model.onnx").is_file():
            from tools.project import copy_project, dvc

            click.echo("no models/ here: training a small copy (20 images per class, 1 epoch)")
            project = copy_project(ROOT, Path(scratch.name) / "project",
                                   params={"sample.per_class": 20, "train.epochs": 1})
            dvc(project, "repro")
    onnx_path, torch_path = project / "models/model.onnx", project / "models/model.pt"
    for path in (onnx_path, torch_path):
        if not path.is_file():
            raise click.ClickException(f"{path} not found: run `dvc repro` in {project} first.")
    files = [Path(p) for p in walk(str(images_dir or project / "data/sample"))][:count]
    ort_model = load("onnxruntime", onnx_path)
    torch_model = load("torch", torch_path)
    decoded = [read_image(f, ort_model.image_size, ort_model.channels) for f in files]
    images = np.stack([decoded[i % len(decoded)] for i in range(count)])

    import onnxruntime
    import torch

    click.echo(f"machine: {os.cpu_count()} CPUs (shared: absolute figures are noisy, ratios "
               f"less so); onnxruntime {onnxruntime.__version__}, torch {torch.__version__} "
               f"({torch.get_num_threads()} threads); {count} images "
               f"{ort_model.image_size}x{ort_model.image_size}x{ort_model.channels}, "
               f"batch {batch_size}")
    ort_rate = throughput(ort_model, images, batch_size)
    torch_rate = throughput(torch_model, images, batch_size)
    ort_single = throughput(ort_model, images[:min(count, 1000)], 1)
    click.echo(f"onnxruntime      {ort_rate:10.0f} images/s (batch {batch_size})")
    click.echo(f"pytorch eager    {torch_rate:10.0f} images/s (batch {batch_size})")
    click.echo(f"ratio onnxruntime / pytorch: {ort_rate / torch_rate:.2f}x")
    click.echo(f"onnxruntime      {ort_single:10.0f} images/s (batch 1)")
    api = bench_api(onnx_path, files, requests, concurrency)
    click.echo(f"API              {api['requests_per_s']:10.0f} requests/s (1 image each, "
               f"{concurrency} clients), p50 {api['p50_ms']:.1f} ms, p99 {api['p99_ms']:.1f} ms, "
               f"{api['images_per_batch']:.1f} images per inference call")
    click.echo(f"ratio API / in-process onnxruntime: {api['requests_per_s'] / ort_rate:.4f} "
               f"(batch {batch_size}), {api['requests_per_s'] / ort_single:.4f} (batch 1)")


if __name__ == "__main__":
    main()
