"""Ray prepare against local prepare (issue 31), measured in one run on this machine.

    python bench/ray_prepare.py                     # 10,000 generated images
    python bench/ray_prepare.py --images 2000 --images 20000   # driver RSS flat in N?
    python bench/ray_prepare.py --address HOST:6379 # an existing cluster instead of a local one

For each N it writes N small images (32x32 RGB PNG, 10 classes; 80/10/10 split files) into a
temp project and runs `python -m stages.prepare` there twice, `prepare.engine: local` (all
cores) and `prepare.engine: ray` (a local cluster of all cores, or --address), each as its own
process, and checks the two data/processed/ are the same bytes. The fixed cost of Ray (start
or join the cluster, ship our code, start the workers) is measured apart, as the extra wall
time of a Ray run over a local one on a tiny dataset (TINY images). Reported per N: wall
seconds of each, images/s, the ratio Ray/local with and without the fixed cost, and each
driver's peak RSS (the stage process's own VmHWM; local's workers hold a shard each on top,
Ray's workers run in the cluster's processes).
"""
import sys

# ruff: noqa: E402
# bench/ off sys.path: bench/queue.py would shadow the standard library's queue module
_BENCH = __import__("os").path.dirname(__import__("os").path.abspath(__file__))
sys.path[:] = [p for p in sys.path if __import__("os").path.abspath(p or ".") != _BENCH]
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
TINY = 8
SIDE = 32
CLASSES = 10
# run by each timed process: the stage, then its own peak RSS (VmHWM) as the last line
STAGE = ("import runpy, sys\n"
         "sys.argv = ['prepare']\n"
         "try:\n    runpy.run_module('stages.prepare', run_name='__main__')\n"
         "except SystemExit as exc:\n    code = exc.code\nelse:\n    code = 0\n"
         "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
         "print('VMHWM', int(hwm.split()[1]) * 1024, flush=True)\n"
         "sys.exit(code)\n")


def make_project(root: Path, images: int) -> Path:
    """A project folder: params.yaml, data/split/*.csv and `images` PNGs under src/."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(31)
    rows = []
    for i in range(images):
        label = str(i % CLASSES)
        path = root / "src" / label / f"{i:06d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        base = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)  # smooth: a photo's PNG size
        Image.fromarray(base).resize((SIDE, SIDE), Image.BILINEAR).save(path)
        rows.append(f"{label}/{path.name},{label},{hashlib.sha256(path.read_bytes()).hexdigest()}")
    cut = [int(images * 0.8), int(images * 0.9)]
    (root / "data/split").mkdir(parents=True, exist_ok=True)
    for name, part in (("train", rows[:cut[0]]), ("val", rows[cut[0]:cut[1]]),
                       ("test", rows[cut[1]:])):
        (root / "data/split" / f"{name}.csv").write_text(
            "path,label,sha256\n" + "".join(r + "\n" for r in part))
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    return root


def prepare(project: Path, engine: str, address: str = "") -> dict:
    """One prepare run in its own process: {wall, rss (driver peak), tree (out digests)}."""
    from tools.project import set_params

    set_params(project, {"data.source": str(project / "src"), "prepare.image_size": SIDE,
                         "prepare.channels": 3, "prepare.engine": engine,
                         "prepare.ray_address": address if engine == "ray" else ""})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tic = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", STAGE], cwd=project, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - tic
    if proc.returncode:
        raise SystemExit(f"prepare ({engine}) failed in {project}:\n{proc.stderr[-3000:]}")
    rss = int(proc.stdout.strip().splitlines()[-1].split()[1])
    out = project / "data/processed"
    digest = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
              for p in sorted(out.rglob("*")) if p.is_file()}
    return {"wall": wall, "rss": rss, "tree": digest}


def run(images: int = 10_000, address: str = "", work: Path | None = None) -> dict:
    """Ray prepare against local prepare at `images` images, in one run: see the module doc.
    Returns {images, local_s, ray_s, fixed_s, local_ips, ray_ips, ratio, ratio_after_start,
    local_rss, ray_rss, same_bytes}."""
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        tiny = make_project(Path(tmp) / "tiny", TINY)
        fixed = prepare(tiny, "ray", address)["wall"] - prepare(tiny, "local")["wall"]
        project = make_project(Path(tmp) / "big", images)
        local = prepare(project, "local")
        ray = prepare(project, "ray", address)
    work_s = max(ray["wall"] - fixed, 1e-9)
    return {"images": images, "local_s": round(local["wall"], 2), "ray_s": round(ray["wall"], 2),
            "fixed_s": round(fixed, 2), "local_ips": round(images / local["wall"]),
            "ray_ips": round(images / ray["wall"]),
            "ratio": round(local["wall"] / ray["wall"], 3),
            "ratio_after_start": round(local["wall"] / work_s, 3),
            "local_rss_mib": round(local["rss"] / 2**20, 1),
            "ray_rss_mib": round(ray["rss"] / 2**20, 1),
            "same_bytes": local["tree"] == ray["tree"]}


@click.command()
@click.option("--images", type=int, multiple=True, help="Dataset size(s); default 10000.")
@click.option("--address", default="", help="A Ray cluster's HOST:6379; default: a local one.")
@click.option("--work", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the temp projects go (default: the system's temp folder).")
def main(images, address, work):
    """Print one JSON line per dataset size (see the module doc)."""
    for n in images or (10_000,):
        click.echo(json.dumps(run(n, address, work)))


if __name__ == "__main__":
    main()
