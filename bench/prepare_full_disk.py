"""Does prepare always exit on a full disk? Many runs of the full-disk case, under load.

    python -m bench.prepare_full_disk                # 300 runs, 2 workers, 2 busy loops
    python -m bench.prepare_full_disk --runs 50 --load 0

Each run builds the tiny project of tests/fake_model_project.py (12 images per split), then
runs `python -m stages.prepare` with 2 workers under a 500-byte file-size limit (a full disk:
every shard write fails with EFBIG), as tests/test_hardening.py does once. A run passes when
prepare exits 1 within --timeout seconds with the one-line error naming data/processed/ and no
temp file left. `--load` busy loops share the cores meanwhile: the race this guards against
(multiprocessing.Pool.terminate killing a worker that held its result queue's lock, then
waiting on that lock forever) hung about 1 run in 80 under that load, and never on an idle
machine. Prints the count of hangs and failures; exit 1 if there is any.
"""
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent


def busy(stop_at: float) -> None:
    while time.time() < stop_at:
        pass


def one_run(timeout: float) -> str:
    """'ok', 'hang' or what went wrong, for one prepare on a fresh tiny project."""
    from tests.fake_model_project import limit_file_size, make_prepare_project

    with tempfile.TemporaryDirectory() as tmp:
        root = make_prepare_project(Path(tmp) / "project")
        params = root / "params.yaml"
        params.write_text(re.sub(r"(\n  workers:) \d+", r"\1 2", params.read_text()))
        try:
            proc = subprocess.run([sys.executable, "-m", "stages.prepare"], cwd=root, text=True,
                                  capture_output=True, timeout=timeout,
                                  preexec_fn=limit_file_size(500),
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
        except subprocess.TimeoutExpired:
            return "hang"
        last = (proc.stderr.strip().splitlines() or [""])[-1]
        if proc.returncode != 1 or "data/processed/" not in last or "Free space" not in last:
            return f"exit {proc.returncode}: {last[:200]}"
        if list((root / "data/processed").glob("**/.*.tmp")):
            return "temp file left"
        return "ok"


@click.command()
@click.option("--runs", default=300, show_default=True)
@click.option("--load", default=2, show_default=True, help="Busy-loop processes meanwhile.")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds before a run is a hang.")
def main(runs, load, timeout):
    """Run the full-disk prepare --runs times and count the hangs."""
    loops = [multiprocessing.Process(target=busy, args=(time.time() + 3600,), daemon=True)
             for _ in range(load)]
    for p in loops:
        p.start()
    results = {}
    try:
        for i in range(runs):
            outcome = one_run(timeout)
            results[outcome] = results.get(outcome, 0) + 1
            if outcome != "ok":
                click.echo(f"run {i}: {outcome}")
    finally:
        for p in loops:
            p.terminate()
    click.echo(f"{runs} runs under {load} busy loops: " +
               ", ".join(f"{k} {v}" for k, v in sorted(results.items())))
    sys.exit(0 if set(results) == {"ok"} else 1)


if __name__ == "__main__":
    main()
