"""Ray prepare against local prepare (issue 31), measured in one run on this machine.

    python -m bench.ray_prepare                     # 10,000 generated images
    python -m bench.ray_prepare --images 2000 --images 20000   # driver RSS flat in N?
    python -m bench.ray_prepare --address HOST:6379 # an existing cluster instead of a local one

For each N it writes N small images (32x32 RGB PNG, 10 classes; 80/10/10 split files) into a
temp project and runs `python -m stages.prepare` there twice, `prepare.engine: local` (all
cores) and `prepare.engine: ray` (a local cluster of all cores, or --address), each as its own
process, and checks the two data/processed/ are the same bytes. Ray's fixed cost (start or
join the cluster, ship our code, start the workers, the first chunk) is timed inside the Ray
run, to its first result. Reported per N: seconds of each, images/s, the ratio local/Ray with
and without the fixed cost, and each driver's peak RSS (the stage process's own VmHWM; local's
workers hold a shard each on top, Ray's run in the cluster's processes).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
SIDE = 32
CLASSES = 10
# run by each timed process: the stage, with the times of its Ray start (connected, first
# chunk back) noted, then one JSON line: those times and its own peak RSS (VmHWM)
STAGE = """
import json, time
import stages.prepare_ray as prepare_ray
from stages.prepare import main

marks, tic = {}, time.perf_counter()
connect, imap = prepare_ray.RayPool.__init__, prepare_ray.RayPool.imap

def timed_connect(self, *args):
    connect(self, *args)
    marks.setdefault("connected", time.perf_counter() - tic)

def timed_imap(self, func, jobs):
    for result in imap(self, func, jobs):
        marks.setdefault("first", time.perf_counter() - tic)
        yield result

prepare_ray.RayPool.__init__, prepare_ray.RayPool.imap = timed_connect, timed_imap
main(args=[], standalone_mode=False)
marks["wall"] = time.perf_counter() - tic
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM")][0]
print(json.dumps({**marks, "rss": int(hwm.split()[1]) * 1024}), flush=True)
"""


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
    """One prepare run in its own process: {wall, connected, first (Ray: seconds from the
    stage's start to connected and to the first chunk back), rss (driver peak), tree}."""
    from tools.project import set_params

    set_params(project, {"data.source": str(project / "src"), "prepare.image_size": SIDE,
                         "prepare.channels": 3, "prepare.engine": engine,
                         "prepare.ray_address": address if engine == "ray" else ""})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", STAGE], cwd=project, env=env,
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"prepare ({engine}) failed in {project}:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    out = project / "data/processed"
    result["tree"] = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
                      for p in sorted(out.rglob("*")) if p.is_file()}
    return result


def run(images: int = 10_000, address: str = "", work: Path | None = None) -> dict:
    """Ray prepare against local prepare at `images` images, in one run: see the module doc.
    Seconds are the stage's own (from its start, imports aside, to its end). fixed_s: Ray's
    start-up, from the stage's start to the first chunk back (connect, ship the code, start
    the workers, one chunk's decode); connect_s: to connected. ratio: local / Ray images per
    second, whole runs; ratio_after_start: local's whole run against Ray's after fixed_s."""
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        project = make_project(Path(tmp) / "project", images)
        local = prepare(project, "local")
        ray = prepare(project, "ray", address)
    after = max(ray["wall"] - ray["first"], 1e-9)
    return {"images": images, "local_s": round(local["wall"], 2), "ray_s": round(ray["wall"], 2),
            "fixed_s": round(ray["first"], 2), "connect_s": round(ray["connected"], 2),
            "local_ips": round(images / local["wall"]), "ray_ips": round(images / ray["wall"]),
            "ray_ips_after_start": round(images / after),
            "ratio": round(local["wall"] / ray["wall"], 3),
            "ratio_after_start": round(local["wall"] / after, 3),
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
