"""The hostile HTTP load of issue 30 against a real `tools.serve`, bounded, loopback only.

    python -m bench.serve_load --model models/model.onnx [--limit 64] [--quick]

Starts the server on a free 127.0.0.1 port (--max-pixels 40,000,000, --limit-concurrency
--limit) and runs four phases, each a fixed number of requests and a few seconds, while a
probe process asks /health every 20 ms on a keep-alive connection:

  slow-header   80 connections that send half a request's headers and stall (more than the
                limit), while the probe runs for 3 s; the probe's answers are the phase's
  worst-case    16 concurrent worst-case predicts (bench/serve_memory.py's 39 M pixel TIFF
                and 6300 x 6300 PNG)
  new-conn      32 clients, 5 predicts each of a small PNG, a new connection per request
  keep-alive    60 clients (kept under --limit), 5 predicts each on one kept-alive connection

Prints one table row per phase: predict requests, their 5xx and 503 counts, the /health
probes, their non-200 count, and /health's latency p50, p99 and max. Targets: no 5xx, no 503
up to the limit, /health always 200, /health p99 under 100 ms.
"""
import argparse
import io
import os
import socket
import subprocess
import sys
import threading
import time

from bench.serve_memory import HEALTH_TARGET_MS, ROOT, free_port, worst_cases

PROBE = """
import sys, threading, time, httpx
url, out, stop = sys.argv[1], [], threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
with httpx.Client(timeout=30) as client:
    client.get(url + "/health")
    print("started", flush=True)
    while not stop.is_set():
        start = time.perf_counter()
        try:
            code = client.get(url + "/health").status_code
        except httpx.HTTPError:
            code = 0
        out.append(f"{code}:{(time.perf_counter() - start) * 1000:.2f}")
        time.sleep(0.02)
print(" ".join(out))
"""


class Probe:
    """/health asked every 20 ms from its own process (the clients' threads do not delay it)."""

    def __init__(self, url):
        self.proc = subprocess.Popen([sys.executable, "-c", PROBE, url], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "started"

    def stop(self) -> list[tuple[int, float]]:
        out = self.proc.communicate("stop\n", timeout=60)[0].split()
        return [(int(code), float(ms)) for code, ms in (x.split(":") for x in out)]


def small_png() -> bytes:
    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (96, 96, 3), np.uint8)).save(
        buf, "PNG")
    return buf.getvalue()


def multipart(name: str, data: bytes) -> tuple[bytes, str]:
    boundary = "serve-load-boundary"
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"'
            f'\r\nContent-Type: application/octet-stream\r\n\r\n').encode() + data + (
            f"\r\n--{boundary}--\r\n").encode()
    return body, f"multipart/form-data; boundary={boundary}"


def clients(port, n: int, per_client: int, upload, keep_alive: bool) -> list[int]:
    """n threads, each sending per_client predicts (upload(i): the (name, bytes) to send),
    started together, with http.client (a light client: the load generator shares the
    cores): every status code (0: no answer)."""
    import http.client

    codes, barrier = [], threading.Barrier(n)

    def run(i):
        body, kind = multipart(*upload(i))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        barrier.wait()
        for _ in range(per_client):
            codes.append(post(conn, "/predict", body, kind))
            if not keep_alive:
                conn.close()  # the next request opens a new connection
        conn.close()

    together(run, n)
    return codes


def post(conn, path: str, body: bytes, kind: str) -> int:
    """POST body to path on conn: the answer's status, or 0 (and conn closed) when none came."""
    import http.client

    try:
        conn.request("POST", path, body, {"Content-Type": kind})
        response = conn.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException):
        conn.close()
        return 0


def together(run, n: int, started=None):
    """run(0) ... run(n - 1), each in its own thread, all started before any is joined; what
    started() returns, called once they all are (None without it)."""
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    out = started() if started is not None else None
    for t in threads:
        t.join()
    return out


def slow_headers(port, n: int, seconds: float) -> list[int]:
    """n connections that stall mid-headers for `seconds`: no predicts, only the probe."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # headers never end
            sockets.append(s)
        time.sleep(seconds)
    finally:
        for s in sockets:
            s.close()
    return []


def percentile(values, q) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else 0.0


def start(model, port, extra=(), max_pixels: int = 40_000_000):
    """A real server on loopback with --max-pixels max_pixels and `extra` options, once it is
    ready; (process, url)."""
    import httpx

    cmd = [sys.executable, "-m", "tools.serve", "--model", str(model), "--port", str(port),
           "--host", "127.0.0.1", "--max-pixels", str(max_pixels), "--log-level", "warning",
           *extra]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"server did not start: {proc.stderr.read().decode()}")
        time.sleep(0.2)


def run(model, limit: int = 64, quick: bool = False, extra=()) -> list[dict]:
    """Each phase's row: phase, requests, 5xx, 503, probes, health_bad, p50, p99, max (ms)."""
    worst, small = worst_cases(), small_png()
    names = ("tall.tiff", "big.png")
    scale = 2 if quick else 1
    phases = [
        ("slow-header", lambda port: slow_headers(port, 80 // scale, 3.0)),
        ("worst-case", lambda port: clients(
            port, 16 // scale, 1, lambda i: (names[i % 2], worst[names[i % 2]]), True)),
        ("new-conn", lambda port: clients(
            port, 32 // scale, 5, lambda i: ("small.png", small), False)),
        ("keep-alive", lambda port: clients(
            port, min(60, limit) // scale, 5, lambda i: ("small.png", small), True)),
    ]
    port = free_port()
    proc, url = start(model, port, ["--limit-concurrency", str(limit), *extra])
    rows = []
    from collections import Counter

    try:
        for name, phase in phases:
            probe = Probe(url)
            codes = phase(port)
            time.sleep(0.2)
            health = probe.stop()
            ms = [m for _, m in health]
            rows.append({"phase": name, "requests": len(codes),
                         "5xx": sum(c >= 500 or c == 0 for c in codes),
                         "503": sum(c == 503 for c in codes), "probes": len(health),
                         "health_bad": sum(c != 200 for c, _ in health),
                         "p50": percentile(ms, 0.5), "p99": percentile(ms, 0.99),
                         "max": max(ms, default=0.0),
                         "answers": dict(sorted(Counter(codes).items()))})
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
    return rows


def table(rows) -> str:
    lines = ["| phase | predict requests | 5xx | 503 | /health probes | /health not 200 | "
             "/health p50 ms | p99 ms | max ms |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['phase']} | {r['requests']} | {r['5xx']} | {r['503']} | "
                     f"{r['probes']} | {r['health_bad']} | {r['p50']:.1f} | {r['p99']:.1f} | "
                     f"{r['max']:.1f} |")
    total = {k: sum(r[k] for r in rows) for k in ("requests", "5xx", "503", "probes",
                                                  "health_bad")}
    lines.append(f"| total | {total['requests']} | {total['5xx']} | {total['503']} | "
                 f"{total['probes']} | {total['health_bad']} | | "
                 f"{max(r['p99'] for r in rows):.1f} | {max(r['max'] for r in rows):.1f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/model.onnx")
    parser.add_argument("--limit", type=int, default=64, help="--limit-concurrency")
    parser.add_argument("--quick", action="store_true", help="half the clients of each phase")
    args = parser.parse_args()
    rows = run(args.model, args.limit, args.quick)
    print(table(rows))
    print("answers: " + "; ".join(f"{r['phase']} {r['answers']}" for r in rows))
    worst = next(r for r in rows if r["phase"] == "worst-case")
    print(f"targets: 0 x 5xx, 0 x 503 up to the limit, /health always 200; /health p99 under "
          f"{HEALTH_TARGET_MS} ms with 16 worst-case requests (measured {worst['p99']:.1f} ms)")


if __name__ == "__main__":
    main()
