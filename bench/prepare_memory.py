"""prepare's peak RSS and CPU at two dataset sizes, two versions of the code in turns (paired).

    python -m bench.prepare_memory                      # this checkout's code
    git archive main stages | tar -x -C /tmp/old-code   # another version's stages/ ...
    python -m bench.prepare_memory --code /tmp/old-code --code .   # ... and this one, in turns

Uses what `python -m bench.scale` left in --source (default /tmp/scale-bench): for each N
(default 25,000 and 100,000) it copies params.yaml and data/split/ of project-N into
--work/project-N (the originals are only read), sets prepare.image_size to --image-size (the
bench's 160 px) and prepare.workers to --workers, and runs the prepare stage there as its own
process. Peak RSS is sampled as bench/scale.py does: the largest sum of the resident memory of
the stage's process and its children, every 50 ms. The stage process also reports its wall
time, its own CPU (the parent's: the serial part, imports included), its workers' CPU, and the
seconds its processes spent in fsync. CPU times and RSS hold on a loaded machine; wall times
do not. Each --code is run once per N per --rounds, alternating, so a load change hits both.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
FSYNC_LOG = "PREPARE_MEMORY_FSYNC_LOG"


def stage(code: str) -> None:
    """Run stages.prepare from `code` in this process (cwd: the project) and print one JSON
    line of its times."""
    import resource

    sys.path.insert(0, str(Path(code).resolve()))
    log = os.environ[FSYNC_LOG]
    fsync = os.fsync

    def timed_fsync(fd):  # inherited by the forked workers: each call appends its seconds
        tic = time.perf_counter()
        fsync(fd)
        with open(log, "a") as f:
            f.write(f"{time.perf_counter() - tic:.6f}\n")

    os.fsync = timed_fsync
    tic = time.perf_counter()
    from stages.prepare import main as prepare

    prepare(args=[], standalone_mode=False)
    wall = time.perf_counter() - tic
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"wall": wall, "parent_cpu": me.ru_utime + me.ru_stime,
                      "workers_cpu": kids.ru_utime + kids.ru_stime}))


def run(code: Path, project: Path) -> dict:
    from bench.scale import tree_rss

    log = project / "fsync.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, FSYNC_LOG: str(log), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "bench.prepare_memory", "--stage", str(code)],
                            cwd=project, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peak, seen, vm = 0, {}, vmstat()
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        sample(proc.pid, seen)
        time.sleep(0.05)
    vm = {k: v - vm.get(k, 0) for k, v in vmstat().items()}
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"prepare failed in {project}:\n{out[-3000:]}\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result["fsync"] = sum(float(s) for s in log.read_text().split()) if log.exists() else 0.0
    wchan = seen.pop("wchan", {})
    workers = [v for pid, v in seen.items() if pid != proc.pid]
    return {**result, "peak_rss": peak, "vm": vm, "wchan": wchan, **{
        f"workers_{key}": sum(w[key] for w in workers) for key in ("run", "queued", "alive",
                                                                     "read_bytes", "disk")}}


def vmstat() -> dict:
    """The machine's page-reclaim counters (a full page cache makes the kernel scan)."""
    keep = ("pgscan_kswapd", "pgscan_direct", "pgsteal_kswapd", "pgsteal_direct", "pgmajfault")
    rows = (line.split() for line in Path("/proc/vmstat").read_text().splitlines())
    return {k: int(v) for k, v in rows if k in keep}


def sample(pid: int, seen: dict) -> None:
    """Per process of the tree: seconds on a CPU, seconds runnable but waiting for one (other
    load), seconds alive (first to last sample), bytes read from storage (not the page
    cache), and about how long it was seen in a disk sleep (state D: fsync, a write held back
    by the kernel's dirty-page limits, a read). Alive - on CPU - queued = blocked (I/O, or
    waiting for a job)."""
    import psutil

    try:
        pids = [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.NoSuchProcess:
        return
    now = time.perf_counter()
    for p in pids:
        try:
            run_ns, wait_ns, _ = Path(f"/proc/{p}/schedstat").read_text().split()
            io = dict(line.split(": ") for line in
                      Path(f"/proc/{p}/io").read_text().splitlines())
        except (OSError, ValueError):
            continue
        old = seen.get(p, {"first": now, "last": now, "disk": 0.0})
        try:  # the state after "pid (comm)": D is an uninterruptible (disk) sleep
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            state = ""
        if state == "D":  # where in the kernel (any process of the tree: the parent's too)
            try:
                where = Path(f"/proc/{p}/wchan").read_text() or "?"
            except OSError:
                where = "?"
            waits = seen.setdefault("wchan", {})
            waits[where] = waits.get(where, 0) + 1
        seen[p] = {"first": old["first"], "last": now, "alive": now - old["first"],
                   "run": int(run_ns) / 1e9, "queued": int(wait_ns) / 1e9,
                   "read_bytes": int(io["read_bytes"]),
                   "disk": old["disk"] + (now - old["last"] if state == "D" else 0.0)}


@click.command()
@click.option("--source", default="/tmp/scale-bench", show_default=True, type=click.Path(),
              help="Where bench/scale.py left tree-N and project-N (only read).")
@click.option("--work", default="/tmp/prepare-memory", show_default=True, type=click.Path(),
              help="Where the project copies go (data/processed is written there).")
@click.option("--sizes", default="25000,100000", show_default=True)
@click.option("--image-size", default=160, show_default=True)
@click.option("--workers", default=2, show_default=True)
@click.option("--rounds", default=1, show_default=True)
@click.option("--code", "codes", multiple=True, type=click.Path(exists=True),
              help="A folder holding a stages/ package (repeat to compare; default: this one).")
@click.option("--stage", "stage_code", default=None, hidden=True)
def main(source, work, sizes, image_size, workers, rounds, codes, stage_code):
    """Print each run's peak RSS and CPU, then the peak RSS ratio of the largest N to the
    smallest per code."""
    if stage_code:
        return stage(stage_code)
    from tools.project import set_params

    codes = [Path(c).resolve() for c in codes] or [ROOT]
    ns = [int(s) for s in sizes.split(",")]
    peaks = {}
    for n in ns:
        project = Path(work) / f"project-{n}"
        shutil.rmtree(project, ignore_errors=True)
        (project / "data").mkdir(parents=True)
        shutil.copy(Path(source) / f"project-{n}" / "params.yaml", project / "params.yaml")
        shutil.copytree(Path(source) / f"project-{n}" / "data/split", project / "data/split")
        set_params(project, {"prepare.image_size": image_size, "prepare.workers": workers})
    for r in range(rounds):
        for n in ns:
            for code in codes:
                res = run(code, Path(work) / f"project-{n}")
                peaks.setdefault(str(code), {}).setdefault(n, []).append(res["peak_rss"])
                click.echo(f"round {r + 1} N={n} {code}: peak RSS {res['peak_rss'] / 2**20:.0f} "
                           f"MiB, wall {res['wall']:.1f} s, parent CPU {res['parent_cpu']:.2f} s, "
                           f"workers CPU {res['workers_cpu']:.1f} s, fsync {res['fsync']:.1f} s")
                click.echo(f"    workers: alive {res['workers_alive']:.1f} s, on CPU "
                           f"{res['workers_run']:.1f} s, runnable but queued "
                           f"{res['workers_queued']:.1f} s, in disk sleep "
                           f"~{res['workers_disk']:.1f} s (sampled), read from storage "
                           f"{res['workers_read_bytes'] / 2**20:.0f} MiB; machine {res['vm']}; "
                           f"disk sleep samples by kernel function {res['wchan']}")
    for n in ns:  # the 7 GiB of shards at 100,000 do not stay behind
        shutil.rmtree(Path(work) / f"project-{n}" / "data/processed", ignore_errors=True)
    if len(ns) > 1:
        for code, by_n in peaks.items():
            small, large = min(by_n[min(ns)]), min(by_n[max(ns)])
            click.echo(f"{code}: peak RSS N={max(ns)} / N={min(ns)}: {large / small:.2f} "
                       f"({large / 2**20:.0f} / {small / 2**20:.0f} MiB, the least of each)")


if __name__ == "__main__":
    main()
