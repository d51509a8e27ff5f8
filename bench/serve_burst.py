"""A burst of worst-case images against a real `tools.serve`: every request must be answered
(a result, 503 with Retry-After, or 408) within the documented bound, and /health stay fast.

    python -m bench.serve_burst --model models/model.onnx [--clients 16] [--size 7071]
                                [--mode RGB] [-- SERVE OPTIONS...]

Starts the server on a free 127.0.0.1 port (--max-pixels 50,000,000, the pipeline's default)
and sends --clients concurrent POST /predict, each one --size x --size PNG of --mode (a
7071 x 7071 RGB PNG: 146 KB on the wire, 240 MiB to decode for an RGB model), on their own
connections, started together, while a probe process asks /health every 20 ms. Each client
waits at most --client-timeout seconds (default 120) for its answer. Prints the answers by
status with their slowest time, the Retry-After values, the requests left unanswered, and
/health's probes, p50, p99 and max.
"""
import argparse
import io
import threading
import time
from collections import Counter

from bench.serve_load import Probe, multipart, percentile, together
from bench.serve_memory import HEALTH_TARGET_MS, free_port


def worst_png(size: int = 7071, mode: str = "RGB") -> bytes:
    """A size x size PNG of one colour: small on the wire, size^2 pixels to decode."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new(mode, (size, size)).save(buf, "PNG")
    return buf.getvalue()


def start(model, port, extra=()):
    """A real server with --max-pixels 50,000,000 and `extra` options; (process, url)."""
    from bench.serve_load import start as start_server

    return start_server(model, port, extra, max_pixels=50_000_000)


def burst(port, n: int, image: bytes, client_timeout: float, answers=None) -> list[dict]:
    """n concurrent predicts of `image`, each on its own connection, started together: per
    request {status (0: no answer within client_timeout), seconds, retry_after, detail}.
    answers: a list to which each request's result is appended as it arrives (for a caller
    that watches the burst while it runs)."""
    import http.client
    import json

    body, kind = multipart("worst.png", image)
    results, barrier = [None] * n, threading.Barrier(n)

    def one(i):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=client_timeout)
        barrier.wait()
        start = time.perf_counter()
        try:
            conn.request("POST", "/predict", body, {"Content-Type": kind})
            response = conn.getresponse()
            data = response.read()
            try:
                detail = json.loads(data).get("detail", "")
            except ValueError:
                detail = data[:200].decode("utf-8", "replace")
            results[i] = {"status": response.status, "retry_after": response.getheader(
                "retry-after"), "detail": detail}
        except (OSError, http.client.HTTPException) as exc:
            results[i] = {"status": 0, "retry_after": None, "detail": type(exc).__name__}
        finally:
            conn.close()
        results[i]["seconds"] = time.perf_counter() - start
        if answers is not None:
            answers.append(results[i])

    together(one, n)
    return results


def run(model, clients: int = 16, size: int = 7071, mode: str = "RGB", extra=(),
        client_timeout: float = 120.0) -> dict:
    """One burst against a fresh server: {requests: [...], health: [(code, ms)], image_bytes}."""
    image = worst_png(size, mode)
    port = free_port()
    proc, url = start(model, port, extra)
    try:
        probe = Probe(url)
        requests = burst(port, clients, image, client_timeout)
        time.sleep(0.2)
        health = probe.stop()
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except Exception:  # noqa: BLE001 - a server that will not stop is killed
            proc.kill()
        log = proc.stderr.read().decode("utf-8", "replace")
    return {"requests": requests, "health": health, "image_bytes": len(image), "log": log}


def summary(result: dict) -> str:
    requests, health = result["requests"], result["health"]
    ms = [m for _, m in health]
    slowest = {}
    for r in requests:
        slowest[r["status"]] = max(slowest.get(r["status"], 0.0), r["seconds"])
    answers = ", ".join(f"{count} x {status or 'no answer'} (slowest {slowest[status]:.1f} s)"
                        for status, count in sorted(Counter(r["status"] for r in requests)
                                                    .items()))
    retry = sorted(Counter(r["retry_after"] for r in requests if r["status"] == 503).items())
    return (f"{len(requests)} requests of a {result['image_bytes']:,}-byte PNG: {answers}; "
            f"Retry-After on 503: {dict(retry)}\n"
            f"/health: {len(health)} probes, {sum(c != 200 for c, _ in health)} not 200, "
            f"p50 {percentile(ms, 0.5):.1f} ms, p99 {percentile(ms, 0.99):.1f} ms, max "
            f"{max(ms, default=0.0):.1f} ms (target {HEALTH_TARGET_MS} ms)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/model.onnx")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--size", type=int, default=7071)
    parser.add_argument("--mode", default="RGB", choices=["RGB", "L"])
    parser.add_argument("--client-timeout", type=float, default=120.0)
    parser.add_argument("serve_options", nargs="*", help="more tools.serve options, after --")
    args = parser.parse_args()
    print(summary(run(args.model, args.clients, args.size, args.mode, args.serve_options,
                      args.client_timeout)))


if __name__ == "__main__":
    main()
