"""Peak memory of `tools.serve` under concurrent worst-case images, next to its budget.

    python -m bench.serve_memory --model models/model.onnx [--clients 16] [--max-decode-mb 256]

Starts a real server on a free loopback port (with --max-pixels 40,000,000), then sends
--clients concurrent requests, half a 1 x 39,000,000 pixel TIFF (a few hundred bytes that
declare 39 M pixels), half a 6300 x 6300 RGB PNG (about 120 KB), while a probe asks /health
every 20 ms. Prints the server's peak RSS (VmHWM) against the 1 GiB target, the slowest /health
answer against 100 ms, the status codes, and the RSS after the burst.
"""
import argparse
import io
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RSS_TARGET_MB, HEALTH_TARGET_MS = 1024, 100


def worst_cases() -> dict:
    """{name: bytes}: the two images of issue 14, item 4."""
    import numpy as np
    from PIL import Image

    out = {}
    buf = io.BytesIO()
    Image.new("1", (1, 39_000_000)).save(buf, "TIFF", compression="tiff_adobe_deflate")
    out["tall.tiff"] = buf.getvalue()
    buf = io.BytesIO()
    Image.fromarray(np.zeros((6300, 6300, 3), np.uint8)).save(buf, "PNG", optimize=True)
    out["big.png"] = buf.getvalue()
    return out


PROBE = """
import sys, threading, time, httpx
url, out, stop = sys.argv[1], [], threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
with httpx.Client(timeout=10) as client:
    client.get(url + "/health")
    print("started", flush=True)
    while not stop.is_set():
        start = time.perf_counter()
        client.get(url + "/health")
        out.append((time.perf_counter() - start) * 1000)
        time.sleep(0.02)
print(" ".join(f"{x:.2f}" for x in out))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vm(pid: int, key: str) -> float:
    """VmHWM (peak) or VmRSS of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(model, clients: int = 16, max_decode_mb: float | None = None, extra=()) -> dict:
    import httpx

    images = worst_cases()
    port = free_port()
    cmd = [sys.executable, "-m", "tools.serve", "--model", str(model), "--port", str(port),
           "--max-pixels", "40000000", "--log-level", "warning", *extra]
    if max_decode_mb:
        cmd += ["--max-decode-mb", str(max_decode_mb)]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start: {proc.stderr.read().decode()}")
            time.sleep(0.2)
        idle = vm(proc.pid, "VmRSS")
        # The probe runs in its own process: the clients' threads here do not delay it.
        probe = subprocess.Popen([sys.executable, "-c", PROBE, url], stdout=subprocess.PIPE,
                                 stdin=subprocess.PIPE, text=True)
        assert probe.stdout.readline().strip() == "started"

        codes = []

        ready = threading.Barrier(clients + 1)

        def ask(i):
            name = ("tall.tiff", "big.png")[i % 2]
            with httpx.Client(timeout=300) as client:  # built before the burst: no client
                ready.wait()                          # start-up CPU inside the measurement
                r = client.post(f"{url}/predict", files={"files": (name, images[name])})
            codes.append((name, r.status_code))

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        ready.wait()
        start = time.perf_counter()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - start
        time.sleep(0.3)
        health = [float(x) for x in probe.communicate("stop\n", timeout=30)[0].split()]
        return {"peak_rss_mb": vm(proc.pid, "VmHWM"), "idle_rss_mb": idle,
                "after_rss_mb": vm(proc.pid, "VmRSS"), "health_max_ms": max(health),
                "health_n": len(health), "codes": sorted(codes), "seconds": seconds,
                "sizes": {k: len(v) for k, v in images.items()}}
    finally:
        proc.terminate()
        proc.wait(20)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/model.onnx")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--max-decode-mb", type=float, default=None)
    args = parser.parse_args()
    r = run(args.model, args.clients, args.max_decode_mb)
    from collections import Counter

    print(f"images: {r['sizes']}; {args.clients} concurrent requests in {r['seconds']:.1f} s; "
          f"answers {dict(Counter(r['codes']))}")
    print(f"peak RSS {r['peak_rss_mb']:.0f} MiB (budget {RSS_TARGET_MB} MiB; idle "
          f"{r['idle_rss_mb']:.0f} MiB, after the burst {r['after_rss_mb']:.0f} MiB)")
    print(f"/health slowest {r['health_max_ms']:.1f} ms of {r['health_n']} probes (budget "
          f"{HEALTH_TARGET_MS} ms)")


if __name__ == "__main__":
    main()
