"""How the data path scales: ingest, validate, split, prepare and train on synthetic trees of N.

    python -m bench.scale                          # N = 25,000 and 100,000 (the issue's sizes)
    python -m bench.scale --sizes 5000,20000       # what fits in a shorter session

It prints its expected duration first (about 9 minutes for the default sizes on 2 idle cores,
1.5 of them writing the 125,000 seeded JPEGs once: they stay under --work and are reused).

For each N it writes a tree of N RGB JPEGs of 200-400 px in 10 classes (seeded: smooth random
pictures, so no two are near-duplicates), copies the project, points data.source at the tree,
prepares at --image-size px RGB and runs each stage as its own process, like DVC does:
ingest, validate, split, prepare, then train for one epoch. It prints, per N:

- seconds per 1,000 files of ingest, validate, split and prepare;
- peak RSS of each stage: the largest sum of the resident memory of the stage's process and
  its children (prepare's and ingest's workers), sampled every 50 ms;
- prepare's speed against a single-process decode loop (stages.lib.modality.imagecore.load_image
  over the first --decode-sample train files, nothing written), run --decode-runs times before
  prepare and as many just after it, each in a fresh process, their median (a process decodes
  up to 20% faster or slower than the next, and the machine's speed drifts within
  minutes): target >= 1.6 on 2 cores;
- train's first-epoch images/s (the stage's own timing, logs/train.json) against a bare loop:
  the same model, batch size, optimizer, thread count and train.deterministic over the same
  images held in memory
  as one uint8 array (normalised per batch), for one whole epoch timed the same way (or
  --bare-steps steps after a warm-up): target >= 0.95. The stage and the bare loop take
  --rounds turns, each in a fresh process, and their medians are compared: on these machines
  one process trains up to 20% faster or slower than the next, and steadily so within itself
  (the same loop in six processes in a row: 1,283 to 1,632 images/s), so one run against one
  run measures which process was lucky. The decode loops run in fresh processes too;
- the same comparison without that luck (--paired-epochs): bench/train.py --processed runs the
  stage's own fit() over the shards and the bare loop over the split in memory in one process,
  one bare step before each stage step on the same samples, after a warm-up epoch.

At the end, the ratios of peak RSS between the largest and the smallest N (target <= 1.25 for
prepare and train). Timings share the machine with whatever else runs.
"""
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
CLASSES = 10
STAGES = ("ingest", "validate", "split", "prepare", "train")


def write_jpeg(job):
    """One seeded picture: 6x6 random colours, bilinear-upscaled to a random 200-400 px."""
    import numpy as np
    from PIL import Image

    path, seed = job
    rng = np.random.default_rng(seed)
    w, h = (int(v) for v in rng.integers(200, 401, 2))
    small = rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)
    img = Image.fromarray(small, "RGB").resize((w, h), Image.Resampling.BILINEAR)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    img.save(path, format="JPEG", quality=90)


def build_tree(root: Path, n: int) -> None:
    done = root / ".complete"
    if done.exists() and done.read_text() == str(n):
        return
    jobs = [(str(root / f"c{i % CLASSES}" / f"{i:07d}.jpg"), i) for i in range(n)]
    with ProcessPoolExecutor() as pool:
        list(pool.map(write_jpeg, jobs, chunksize=256))
    done.write_text(str(n))


def tree_rss(pid: int) -> int:
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def run_stage(name: str, cwd: Path) -> tuple[float, int]:
    """(seconds, peak RSS of the process tree) of `python -m stages.<name>` in cwd."""
    seconds, peak, _ = run_polled([sys.executable, "-m", f"stages.{name}"], cwd, name)
    return seconds, peak


def run_polled(cmd: list, cwd: Path, name: str) -> tuple[float, int, str]:
    """(seconds, peak RSS of the process tree, stdout) of cmd, its memory sampled every 50 ms
    (stages and baseline loops alike, so the sampling's cost falls on both)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tic = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        time.sleep(0.05)
    seconds = time.perf_counter() - tic
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"{name} failed:\n{out[-3000:]}\n{err[-3000:]}")
    return seconds, peak, out


def decode_loop(project: Path, source: Path, count: int, size: int) -> float:
    """Files/s of a single-process decode loop over the first `count` train files."""
    from stages.lib.modality.imagecore import load_image
    from stages.lib.io import read_csv

    rows = read_csv(project / "data/split/train.csv")[:count]
    tic = time.perf_counter()
    for r in rows:
        load_image(source / r["path"], size, 3)
    return len(rows) / (time.perf_counter() - tic)


def bare_train(project: Path, steps: int, batch_size: int, lr: float) -> float:
    """Images/s of the plainest loop over the train images held in memory (uint8). steps 0:
    one whole epoch timed from its first step, as the stage times its epoch (the stage's
    figure includes its first, slower steps; so does this one); steps > 0: that many steps
    after 5 untimed warm-up steps (shorter, and noisier: 60 steps are about 2 s)."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from stages.lib.modality.imagecore import normalize
    from stages.lib.params import load
    from stages.lib.data.shards import samples_view, load_split
    from stages.tasks.classification.model import build_model

    # the stage's settings: deterministic algorithms cost this loop 3-4% here (measured in one
    # process, blocks taking turns), which is the user's choice, not streaming's cost
    torch.use_deterministic_algorithms(load("train", project / "params.yaml").deterministic)
    _, y_view, meta = load_split("train", project / "data/processed")
    x = samples_view("train", project / "data/processed")[:]  # the whole split, in memory
    y = torch.from_numpy(np.asarray(y_view[:]))
    torch.manual_seed(0)
    model = build_model("small_cnn", len(meta["classes"]), meta["channels"])
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    order = torch.randperm(len(x))
    if steps:
        warm = 5 if len(x) // batch_size > 10 else 1
        steps = max(1, min(steps, len(x) // batch_size - warm))
    else:
        warm, steps = 0, -(-len(x) // batch_size)
    seen, tic = 0, time.perf_counter()
    for s in range(steps + warm):
        if s == warm:  # the first steps are warm-up
            seen, tic = 0, time.perf_counter()
        idx = order[s * batch_size:(s + 1) * batch_size].numpy()
        xb = torch.from_numpy(normalize(x[idx], meta["mean"], meta["std"]))
        loss = F.cross_entropy(model(xb), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        seen += len(idx)
    return seen / (time.perf_counter() - tic)


@click.command()
@click.option("--sizes", default="25000,100000", show_default=True,
              help="Comma-separated tree sizes N.")
@click.option("--work", default="/tmp/scale-bench", show_default=True, type=click.Path(),
              help="Where the trees and project copies go (trees are reused).")
@click.option("--image-size", default=160, show_default=True)
@click.option("--train-image-size", default=32, show_default=True, type=int,
              help="Re-prepare at this size before train (0 = --image-size): small_cnn at 160 px "
                   "trains at ~10-30 images/s on 2 CPU cores, an hour or two per epoch of "
                   "100,000.")
@click.option("--batch-size", default=64, show_default=True)
@click.option("--decode-sample", default=2000, show_default=True,
              help="Train files the single-process decode loop decodes.")
@click.option("--decode-runs", default=3, show_default=True,
              help="Decode loops (fresh processes) before prepare, and as many after; their "
                   "median is prepare's baseline.")
@click.option("--bare-steps", default=0, show_default=True,
              help="Steps of the bare loop; 0: one whole epoch, timed like the stage's.")
@click.option("--rounds", default=3, show_default=True,
              help="Train stage runs and bare loops, taking turns, each a fresh process; the "
                   "medians are compared (one process's speed differs from the next's by up "
                   "to 20% on these machines, while steady within it).")
@click.option("--paired-epochs", default=1, show_default=True,
              help="Then bench/train.py --processed on the same shards: the stage's fit() and a "
                   "bare loop over the split in memory, step by step in one process (no luck "
                   "of the process on either side), this many epochs after a warm-up one; "
                   "0 = skip.")
@click.option("--loop", type=click.Choice(["decode", "bare"]), hidden=True,
              help="Run one baseline loop in this process and print its rate (the bench runs "
                   "each in a fresh process).")
@click.option("--project", type=click.Path(), hidden=True)
@click.option("--source", type=click.Path(), hidden=True)
def main(sizes, work, image_size, train_image_size, batch_size, decode_sample, decode_runs,
         bare_steps, rounds, paired_epochs, loop, project, source):
    """Print per-N stage figures and the scaling ratios."""
    if loop == "decode":
        click.echo(decode_loop(Path(project), Path(source), decode_sample, image_size))
        return
    if loop == "bare":
        click.echo(bare_train(Path(project), bare_steps, batch_size, 0.003))
        return

    s = Settings(image_size, train_image_size, batch_size, decode_sample, decode_runs,
                 bare_steps, rounds, paired_epochs)
    work = Path(work)
    results = {}
    ns = [int(x) for x in sizes.split(",")]
    announce(ns, work, s)
    for n in ns:
        results[n] = run_size(n, work, s)
    if len(results) > 1:
        small, large = min(results), max(results)
        for stage in STAGES:
            ratio = results[large][stage]["peak_rss"] / results[small][stage]["peak_rss"]
            click.echo(f"peak RSS {stage:9s} N={large} / N={small}: {ratio:.2f}"
                       + (" (target <= 1.25)" if stage in ("prepare", "train") else ""))
    (work / "results.json").write_text(json.dumps(results, indent=1))


@dataclasses.dataclass
class Settings:
    """The options each N's run reads (main's, as given)."""
    image_size: int
    train_image_size: int
    batch_size: int
    decode_sample: int
    decode_runs: int
    bare_steps: int
    rounds: int
    paired_epochs: int


def announce(ns: list[int], work: Path, s: Settings) -> None:
    """Print the expected run time, from the figures of the issue's machine."""
    trees = sum(n for n in ns if not (work / f"tree-{n}" / ".complete").exists())
    # measured on the 2 idle cores of the machine: stages (ingest, validate, split,
    # prepare twice, a 32 px epoch, the loops) ~3 s per 1,000 files + ~20 s per N; the
    # seeded JPEG trees ~0.65 s per 1,000 files, built once and reused from --work
    guess = sum(3.0 * n / 1000 + 20 for n in ns) + 0.65 * trees / 1000
    guess += sum((s.rounds - 1) * 1.6 * n / 1000 for n in ns)  # each more epoch and bare loop
    guess += sum((s.paired_epochs + 1) * 1.0 * n / 1000 for n in ns if s.paired_epochs)
    guess += 2 * (s.decode_runs - 1) * 2.5 * len(ns)  # each more decode loop: ~2.5 s
    if s.train_image_size in (0, s.image_size) and s.image_size > 64:
        guess += sum(0.7 * n / 20 for n in ns)  # small_cnn at 160 px: ~20 images/s
    click.echo(f"expected: about {max(1, round(guess / 60))} min on 2 idle cores"
               + (f" (including {0.65 * trees / 1000:.0f} s to write {trees:,} JPEGs "
                  f"under {work}, reused next time)" if trees else f" (trees reused from {work})")
               + "; a loaded machine takes longer, and its ratios are not comparable")


def baseline(kind: str, project: Path, tree: Path, s: Settings) -> float:
    """One baseline loop (decode or bare) in a fresh process, watched as stages are."""
    _, _, out = run_polled(
        [sys.executable, "-m", "bench.scale", "--loop", kind, "--project", str(project),
         "--source", str(tree), "--decode-sample", str(s.decode_sample), "--image-size",
         str(s.image_size), "--bare-steps", str(s.bare_steps), "--batch-size",
         str(s.batch_size)], project, f"{kind} loop")
    return float(out.split()[-1])


def run_size(n: int, work: Path, s: Settings) -> dict:
    """Build (or reuse) the tree of n files, run every stage on a fresh copy of the project
    and print and return its figures."""
    from tools.project import copy_project

    tree = work / f"tree-{n}"
    tic = time.perf_counter()
    build_tree(tree, n)
    click.echo(f"N={n}: tree ready ({time.perf_counter() - tic:.0f} s)")
    project = work / f"project-{n}"
    if project.exists():
        shutil.rmtree(project)
    copy_project(ROOT, project, git_init=False, params={
        "data.source": str(tree), "prepare.image_size": s.image_size, "prepare.channels": 3,
        "prepare.mean": [0.5, 0.5, 0.5], "prepare.std": [0.5, 0.5, 0.5],
        "train.epochs": 1, "train.batch_size": s.batch_size})
    r, runs = run_stages(n, project, tree, s)
    stage_runs, bares, before, after = runs["stage"], runs["bare"], runs["before"], runs["after"]
    stage_ips, bare = statistics.median(stage_runs), statistics.median(bares)
    click.echo(f"  train stage first epoch, images/s per run: "
               f"{', '.join(f'{v:.0f}' for v in stage_runs)}; bare loop, each after the "
               f"stage run: {', '.join(f'{v:.0f}' for v in bares)}")
    if s.paired_epochs:
        _, _, out = run_polled(
            [sys.executable, "-m", "bench.train", "--params",
             str(project / "params.yaml"), "--processed", str(project / "data/processed"),
             "--epochs", str(s.paired_epochs)], project, "paired train loops")
        stage_pair, bare_pair = (float(line.split()[-2]) for line in out.splitlines()
                                 if line.startswith(("stage loop:", "bare loop:")))
        r.update(paired_stage_ips=stage_pair, paired_bare_ips=bare_pair)
    decode = statistics.median(before + after)
    prepare_fps = n / r["prepare"]["seconds"]
    r.update(decode_fps=decode, decode_before=before, decode_after=after,
             prepare_fps=prepare_fps, train_ips=stage_ips, bare_ips=bare,
             train_runs=stage_runs, bare_runs=bares,
             threads=runs["record"].get("threads"),
             processed_bytes=sum(f.stat().st_size for f in
                                 (project / "data/processed").rglob("*") if f.is_file()),
             tree_bytes=sum(f.stat().st_size for f in tree.rglob("*.jpg")))
    report(r, s)
    return r


def run_stages(n: int, project: Path, tree: Path, s: Settings) -> tuple[dict, dict]:
    """Each stage's seconds and peak RSS (printed), the decode loops on both sides of prepare
    and the train stage's runs, a bare loop after each: (figures, the runs' rates)."""
    r = {}
    stage_runs, bares = [], []
    for stage in STAGES:
        if stage == "prepare":  # the baseline on both sides of prepare: the machine drifts
            before = [baseline("decode", project, tree, s) for _ in range(s.decode_runs)]
        if stage == "train":
            after = [baseline("decode", project, tree, s) for _ in range(s.decode_runs)]
        if stage == "train" and s.train_image_size and s.train_image_size != s.image_size:
            from tools.project import set_params

            set_params(project, {"prepare.image_size": s.train_image_size})
            run_stage("prepare", project)
            click.echo(f"  (re-prepared at {s.train_image_size} px for train)")
        for k in range(s.rounds if stage == "train" else 1):
            if k:  # the same epoch again, from scratch
                shutil.rmtree(project / "models/checkpoints", ignore_errors=True)
            seconds, peak = run_stage(stage, project)
            if stage == "train":
                record = json.loads((project / "logs/train.json").read_text())
                stage_runs.append(record["epochs"][0]["samples_per_s"])
                bares.append(baseline("bare", project, tree, s))
            if k:
                continue
            r[stage] = {"s_per_1000": seconds / n * 1000, "seconds": seconds,
                        "peak_rss": peak}
            click.echo(f"  {stage:9s} {seconds:8.1f} s  {seconds / n * 1000:6.2f} s/1000 "
                       f"files  peak RSS {peak / 2**20:7.0f} MiB")
    return r, {"stage": stage_runs, "bare": bares, "before": before, "after": after,
               "record": record}


def report(r: dict, s: Settings) -> None:
    """Print one N's ratios against the baselines, and its disk use."""
    prepare_fps, decode = r["prepare_fps"], r["decode_fps"]
    before, after = r["decode_before"], r["decode_after"]
    stage_ips, bare = r["train_ips"], r["bare_ips"]
    click.echo(f"  prepare {prepare_fps:.0f} files/s vs single-process decode loop "
               f"{decode:.0f} files/s (median of {', '.join(f'{v:.0f}' for v in before)} "
               f"before and {', '.join(f'{v:.0f}' for v in after)} after): "
               f"{prepare_fps / decode:.2f}x (target >= 1.6)")
    click.echo(f"  train first epoch {stage_ips:.1f} images/s vs bare in-memory loop "
               f"{bare:.1f} images/s (medians of {s.rounds}): {stage_ips / bare:.3f} "
               f"(target >= 0.95)")
    if s.paired_epochs:
        stage_pair, bare_pair = r["paired_stage_ips"], r["paired_bare_ips"]
        click.echo(f"  train stage's fit() {stage_pair:.1f} images/s vs bare in-memory loop "
                   f"{bare_pair:.1f} images/s, step by step in one process "
                   f"(bench/train.py --processed, {s.paired_epochs} epoch(s) after a warm-up "
                   f"one): {stage_pair / bare_pair:.3f} (target >= 0.95)")
    click.echo(f"  disk: JPEG tree {r['tree_bytes'] / 2**20:.0f} MiB, data/processed "
               f"{r['processed_bytes'] / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
