"""Benchmark ingest against a bare single-process loop on a synthetic tree.

    python -m bench.ingest                       # 20,000 small + 500 large JPEGs (the target)
    python -m bench.ingest --small 2000 --large 50   # a quick run

Prints, from one run: the bare loop's files/s (read + sha256 + full decode, one process),
ingest's cold files/s and its ratio to the bare loop (target >= 1.6 on 2 cores), the warm
re-ingest's time as a fraction of the cold one (target <= 1/20) with the number of files it
rehashed, what `ingest.verify_cache` costs a warm run (sample, the default, against none and
all), and peak memory of the ingest process and of its workers, for the full tree and for a
tree with a quarter of the small files: worker memory must not grow with the file count, and the
parent's only by the manifest rows. Timings share the machine with whatever else runs: compare
the ratios, not the absolute numbers.

The bare loop decodes JPEGs to RGB, as a naive script would; ingest decodes one-frame RGB JPEGs
to grey at full size (stages.lib.modality.imagecore.prefer_grey), which rejects exactly the
same files (tests/test_modality_image.py) for less work. Both decode every byte of every file.
"""
import hashlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import json, resource, sys, time
from pathlib import Path
from stages.ingest import inventory
from stages.lib.params import MAX_PIXELS
root, workers, cache = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
t = time.perf_counter()
rows, stats = inventory(root, workers, MAX_PIXELS, cache, verify=sys.argv[4])
seconds = time.perf_counter() - t
kib = lambda who: resource.getrusage(who).ru_maxrss
rows_bytes = sum(sys.getsizeof(r) + sum(map(sys.getsizeof, r.values())) for r in rows)
print(json.dumps({"seconds": seconds, **stats, "rows_mib": rows_bytes / 2**20,
                  "parent_mib": kib(resource.RUSAGE_SELF) / 1024,
                  "workers_mib": kib(resource.RUSAGE_CHILDREN) / 1024}))
"""


def make_files(args):
    """Write JPEGs [start, stop) of one kind; smooth content with noise, like photos."""
    import numpy as np
    from PIL import Image

    root, kind, start, stop = args
    w, h = (64, 48) if kind == "small" else (2000, 1500)
    for i in range(start, stop):
        rng = np.random.default_rng(i + (10**6 if kind == "large" else 0))
        base = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
        img = Image.fromarray(base, "RGB").resize((w, h), Image.Resampling.BILINEAR)
        arr = np.asarray(img, dtype=np.int16) + rng.integers(-8, 9, (h, w, 3), dtype=np.int16)
        path = Path(root) / f"{kind}{i % 10}" / f"{i:06d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(arr.clip(0, 255).astype(np.uint8), "RGB").save(path, quality=90)


def generate(root: Path, small: int, large: int) -> None:
    jobs = [(str(root), "small", s, min(s + 1000, small)) for s in range(0, small, 1000)]
    jobs += [(str(root), "large", s, min(s + 25, large)) for s in range(0, large, 25)]
    with ProcessPoolExecutor() as pool:
        list(pool.map(make_files, jobs))


def bare_loop(root: Path) -> tuple[int, float]:
    """Read, sha256 and fully decode every file, in one process: the baseline."""
    from PIL import Image

    from stages.ingest import list_files

    files = list_files(root)
    t = time.perf_counter()
    for rel in files:
        data = (root / rel).read_bytes()
        hashlib.sha256(data).hexdigest()
        with Image.open(io.BytesIO(data)) as img:
            img.load()
    return len(files), time.perf_counter() - t


def spin(n: int) -> int:
    return sum(i * i for i in range(n))


def headroom(workers: int) -> float:
    """How much faster `workers` processes finish `workers` equal pure-Python jobs than one
    process finishes them in turn: what the machine can give a parallel ingest right now."""
    workers = workers or os.cpu_count() or 1
    n = 3_000_000
    t = time.perf_counter()
    for _ in range(workers):
        spin(n)
    serial = time.perf_counter() - t
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(spin, [1] * workers))
        t = time.perf_counter()
        list(pool.map(spin, [n] * workers))
    return serial / (time.perf_counter() - t)


def probe(root: Path, workers: int, cache: Path, verify: str = "sample") -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, str(root), str(workers), str(cache),
                           verify],
                          cwd=ROOT, check=True, capture_output=True, text=True,
                          env={**os.environ, "TQDM_DISABLE": "1"})
    return json.loads(proc.stdout.strip().splitlines()[-1])


def quarter_tree(root: Path, dest: Path) -> int:
    """Hard links to every large file and a quarter of the small ones."""
    n = 0
    for path in sorted(root.rglob("*.jpg")):
        if path.parent.name.startswith("large") or int(path.stem) % 4 == 0:
            target = dest / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, target)
            n += 1
    return n


@click.command()
@click.option("--small", default=20000, show_default=True, help="Small JPEGs (64x48) to write.")
@click.option("--large", default=500, show_default=True, help="Large JPEGs (2000x1500).")
@click.option("--workers", default=0, show_default=True, help="ingest.workers (0 = all cores).")
@click.option("--rounds", default=3, show_default=True,
              help="Bare-loop / cold-ingest pairs, run in turn (and as many warm re-ingests); "
                   "the medians are the result, every round is printed.")
def main(small, large, workers, rounds):
    """Time ingest (cold and warm) against a bare single-process loop; print ratios."""
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        generate(tmp / "tree", small, large)
        os.sync()  # no writeback of the new tree competing with the timed runs
        print(f"tree: {small} small + {large} large JPEGs written in "
              f"{time.perf_counter() - t:.0f} s; {os.cpu_count()} cores")
        print(f"parallel headroom now: {headroom(workers):.2f}x for pure-Python work "
              f"(2.0 on 2 idle cores; other load on the machine lowers it)")
        bares, colds = [], []
        for r in range(rounds):  # in turn, so a slow spell of the machine hits both
            n, bare = bare_loop(tmp / "tree")
            cold = probe(tmp / "tree", workers, tmp / f"cache{r}.marshal")  # a new cache: cold
            bares.append(bare)
            colds.append(cold)
            print(f"round {r + 1}: bare loop {n / bare:,.0f} files/s, ingest cold "
                  f"{n / cold['seconds']:,.0f} files/s, ratio {bare / cold['seconds']:.2f}")
        bare = statistics.median(bares)
        cold_s = statistics.median(c["seconds"] for c in colds)
        ratio = statistics.median(b / c["seconds"] for b, c in zip(bares, colds, strict=True))
        print(f"bare loop (1 process: read + sha256 + full decode): {n / bare:,.0f} files/s "
              f"({bare:.1f} s, median)")
        print(f"ingest cold: {n / cold_s:,.0f} files/s ({cold_s:.1f} s, median); ratio to bare "
              f"loop {ratio:.2f} (median of rounds; target >= 1.6 on 2 cores)")
        warms = [probe(tmp / "tree", workers, tmp / f"cache{rounds - 1}.marshal")
                 for _ in range(rounds)]
        warm = statistics.median(w["seconds"] for w in warms)
        print(f"ingest warm: {warm:.2f} s (median of {rounds}) = 1/{cold_s / warm:.0f} of cold "
              f"(target <= 1/20); rehashed {max(w['inspected'] for w in warms)} of {n}; "
              f"ingest.verify_cache: sample rehashed {warms[-1]['verified']} cached files")
        for mode in ("none", "all"):  # what ingest.verify_cache costs a warm run
            runs = [probe(tmp / "tree", workers, tmp / f"cache{rounds - 1}.marshal", mode)
                    for _ in range(rounds)]
            seconds = statistics.median(w["seconds"] for w in runs)
            print(f"ingest warm, verify_cache: {mode}: {seconds:.2f} s (median of {rounds}), "
                  f"{runs[-1]['verified']} cached files rehashed; sample costs "
                  f"{warm - seconds:+.2f} s against it" if mode == "none" else
                  f"ingest warm, verify_cache: all: {seconds:.2f} s (median of {rounds}), "
                  f"{runs[-1]['verified']} cached files rehashed = {seconds / cold_s:.2f} of a "
                  f"cold run")
        cold = colds[-1]
        m = quarter_tree(tmp / "tree", tmp / "quarter")
        quarter = probe(tmp / "quarter", workers, tmp / "cache-quarter.marshal")
        for name, files, r in (("quarter", m, quarter), ("full", n, cold)):
            print(f"peak memory, {name} tree ({files} files): ingest process "
                  f"{r['parent_mib']:.0f} MiB (the manifest rows as Python dicts: "
                  f"{r['rows_mib']:.1f} MiB), largest worker {r['workers_mib']:.0f} MiB")
        grown = cold["parent_mib"] - quarter["parent_mib"]
        rows = cold["rows_mib"] - quarter["rows_mib"]
        print(f"ingest process grew {grown:.0f} MiB for {n - m} more files, "
              f"{grown / rows:.1f}x the growth of the rows themselves (the rows, the per-file "
              f"facts and the cache entries, all O(files)); workers do not grow with files")


if __name__ == "__main__":
    main()
