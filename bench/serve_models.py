"""Requests per second through POST /predict/{name} with two models loaded, against one alone
(issue 39, item 5), on a real `tools.serve` over loopback.

    python -m bench.serve_models [--onnx models/model.onnx] [--clients 16] [--requests 40]

Builds a registry in a temp folder (tests/fake_registry.py: a git repository whose artifacts
`detector` and `ocr` are tiny fake graphs, or copies of --onnx), then, for --rounds rounds,
each time in this order:

  one       a server of `detector#prod` alone; every client posts to /predict/detector
  two-idle  a server of `detector#prod` and `ocr#prod`; every client posts to /predict/detector
            (ocr loaded, idle)
  two-both  the same server; half the clients post to /predict/detector, half to /predict/ocr

The servers start in turn, in the other order every other round; each runs its phases twice.
Each phase is --clients clients (http.client, one kept-alive connection each, started
together) sending --requests predicts of one 96x96 PNG. Prints each phase's best requests/s
(and that run's non-200 count), and its ratio to `one`.
"""
import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from bench.serve_load import free_port, multipart, post, small_png, start, together


def phase(port: int, routes: list[str], clients: int, requests: int) -> tuple[float, int]:
    """(requests per second, non-200 answers): clients threads, client i posting requests
    times to routes[i % len(routes)]."""
    import http.client

    body, kind = multipart("small.png", small_png())
    codes, barrier = [], threading.Barrier(clients + 1)

    def run(i):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        barrier.wait()
        for _ in range(requests):
            codes.append(post(conn, routes[i % len(routes)], body, kind))
        conn.close()

    def release():  # every client waits at the barrier: the clock starts as they go
        barrier.wait()
        return time.perf_counter()

    began = together(run, clients, release)
    seconds = time.perf_counter() - began
    return len(codes) / seconds, sum(c != 200 for c in codes)


def served(repo: Path, models: list[str]):
    """A started server of models (registered names) from repo: (process, port)."""
    port = free_port()
    extra = ["--registry", str(repo)] + [a for m in models[1:] for a in ("--model", m)]
    proc, _ = start(models[0], port, extra)
    return proc, port


def stop(proc) -> None:
    import subprocess

    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


def run(onnx: Path | None, clients: int, requests: int, rounds: int) -> list[dict]:
    from tests.fake_registry import build

    best = {"one": (0.0, 0), "two-idle": (0.0, 0), "two-both": (0.0, 0)}
    with tempfile.TemporaryDirectory(prefix="serve-models-") as tmp:
        os.environ["IMAGE_PIPELINE_MODEL_CACHE"] = str(Path(tmp) / "cache")
        os.environ["DVC_NO_ANALYTICS"] = "1"
        repo = build(Path(tmp), onnx).repo
        servers = [(["detector#prod"], {"one": ["/predict/detector"]}),
                   (["detector#prod", "ocr#prod"], {
                       "two-idle": ["/predict/detector"],
                       "two-both": ["/predict/detector", "/predict/ocr"]})]
        for round_ in range(rounds):
            for models, phases in servers[::-1] if round_ % 2 else servers:  # both orders
                proc, port = served(repo, models)
                try:
                    phase(port, list(phases.values())[0], clients, 5)  # warm the connections
                    for _ in range(2):
                        for name, routes in phases.items():
                            rate, bad = phase(port, routes, clients, requests)
                            best[name] = max(best[name], (rate, bad))
                finally:
                    stop(proc)
    base = best["one"][0]
    return [{"phase": name, "rps": rate, "non_200": bad, "ratio": rate / base}
            for name, (rate, bad) in best.items()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--onnx", type=Path, default=None,
                        help="An exported model both artifacts copy (default: tiny fake graphs)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=40, help="predicts per client")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = run(args.onnx, args.clients, args.requests, args.rounds)
    print(f"{'phase':<10} {'req/s':>8} {'non-200':>8} {'vs one':>7}")
    for r in rows:
        print(f"{r['phase']:<10} {r['rps']:>8.1f} {r['non_200']:>8} {r['ratio']:>7.2f}")


if __name__ == "__main__":
    main()
