"""Prove the pipeline reproduces what dvc.lock says: re-run it in a clean clone, compare hashes.

Not a DVC stage: a tool. It clones the repository at a commit into a temp dir, gets the inputs
DVC tracks outside the pipeline (`dvc add`ed data) from this working copy's cache or, with
--pull, from the DVC remote, runs `dvc repro --force` and compares every out's hash with the
committed dvc.lock. Where an out differs, the stage's metrics files tell whether the difference
is floating-point noise (metrics equal within --tol) or a real change.
"""
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

IDENTICAL = "bit-identical"
WITHIN_TOL = "metrics equal within tolerance"
DIFFERENT = "different"
MISSING = "missing"
NOT_RUN = "not re-run"
UNSUPPORTED = "unsupported CPU"
# the stages whose outs come from float kernels (train.kernels decides whether they are portable)
FLOAT_STAGES = ("train", "evaluate", "export", "report")


def lock_profile(clone: Path) -> str:
    """train.kernels of the commit's params.yaml: the profile its dvc.lock was written under
    (a commit from before profiles existed: native)."""
    import yaml

    params = yaml.safe_load((clone / "params.yaml").read_text()) or {}
    return (params.get("train") or {}).get("kernels", "native")


def profile_lines(written: str) -> tuple[list[str], str]:
    """(what to print about the lock's profile and this machine's, why this machine cannot
    reproduce the float outs bit for bit or "")."""
    from stages.lib.train.kernels import PORTABLE, cpu_name, resolve

    here, why = resolve(written)
    lines = [f"verify: dvc.lock was written under train.kernels {written}; this machine "
             f"({cpu_name()}) runs {here}" + (f" ({why})" if why else "")]
    if written == PORTABLE and not why:
        lines.append("verify: portable: every out must be bit-identical on any x86-64 CPU "
                     "with AVX2")
    elif written != PORTABLE:
        why = ""  # native: only the kind of CPU that wrote it reproduces it; nothing to excuse
        lines.append("verify: native: the outs from train on are bit-identical only on the "
                     "kind of CPU that wrote the lock (metrics are compared within --tol)")
    return lines, why


def metrics_close(expected, got, tol: float) -> bool:
    """Same keys and strings; numbers equal within tol (absolute or relative)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        return expected.keys() == got.keys() and all(
            metrics_close(expected[k], got[k], tol) for k in expected)
    if isinstance(expected, list) and isinstance(got, list):
        return len(expected) == len(got) and all(
            metrics_close(a, b, tol) for a, b in zip(expected, got, strict=True))
    numbers = (int, float)
    if isinstance(expected, numbers) and isinstance(got, numbers) \
            and not isinstance(expected, bool) and not isinstance(got, bool):
        return math.isclose(expected, got, rel_tol=tol, abs_tol=tol)
    return expected == got


def stage_metrics(dvc_yaml: dict, stage: str) -> list[str]:
    """Paths of the metrics files a stage declares in dvc.yaml."""
    entries = dvc_yaml.get("stages", {}).get(stage, {}).get("metrics", [])
    return sorted(e if isinstance(e, str) else next(iter(e)) for e in entries)


def verdict(stage, expected, got, dvc_yaml, committed_metrics, clone, tol) -> str:
    """Verdict for one out: identical, or how the stage's metrics compare."""
    import json

    if got is None:
        return MISSING
    if got == expected:
        return IDENTICAL
    paths = stage_metrics(dvc_yaml, stage)
    if not paths:
        return DIFFERENT
    for path in paths:
        produced = Path(clone) / path
        if path not in committed_metrics or not produced.is_file():
            return DIFFERENT
        if not metrics_close(committed_metrics[path], json.loads(produced.read_text()), tol):
            return DIFFERENT
    return WITHIN_TOL


def compare(committed: dict, produced: dict, dvc_yaml: dict, committed_metrics: dict, clone,
            tol: float, ran: set, stages=None) -> list[dict]:
    """One row per out of the committed dvc.lock (of the selected stages). A stage DVC did not
    run has its committed hashes still in dvc.lock: it proves nothing, so it is not identical."""
    rows = []
    for (stage, out), expected in committed.items():  # dvc.lock order: the pipeline's
        if stages and stage not in stages:
            continue
        got = produced.get((stage, out))
        result = verdict(stage, expected, got, dvc_yaml, committed_metrics, clone, tol) \
            if stage in ran else NOT_RUN
        rows.append({"stage": stage, "out": out, "expected": expected, "got": got or "-",
                     "verdict": result})
    return rows


def table(rows) -> str:
    cols = ("stage", "out", "expected", "got", "verdict")
    widths = [max([len(c)] + [len(str(r[c])) for r in rows]) for c in cols]
    cells = [cols, ["-" * w for w in widths]] + [[str(r[c]) for c in cols] for r in rows]
    lines = ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in cells]
    return "\n".join(line.rstrip() for line in lines)


def upstream(dvc_yaml: dict, lock: dict, targets) -> set[str]:
    """The selected stages and every stage whose outs they depend on, transitively."""
    stages = lock.get("stages", {})
    producer = {out["path"]: name for name, e in stages.items() for out in e.get("outs", [])}
    wanted, todo = set(), list(targets)
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted.add(name)
        for dep in stages.get(name, {}).get("deps", []):
            path = dep["path"]
            todo += [p for o, p in producer.items() if path == o or path.startswith(o + "/")
                     or o.startswith(path + "/")]
    return wanted


def preflight(clone: Path) -> None:
    """Fail in seconds, naming the setting to fix, when the remote is unreachable."""
    from tools.doctor import FAIL, remote_findings
    from stages.lib.io import StageError

    for f in remote_findings(clone):
        if f.level == FAIL:
            raise StageError(f"verify --pull: remote {f.message}\n  fix: {f.fix}")


def copy_local_config(local: Path, dvc_dir: Path) -> list[str]:
    """Copy this working copy's .dvc/config.local into a clone's .dvc/, keeping only what
    applies to the clone's commit: a remote section that only adds settings (credentials) to a
    remote the commit's .dvc/config does not define would make DVC refuse the whole config
    ("expected 'url' for dictionary value"), and so would a default remote it does not know.
    Everything else is kept. Returns the remotes left out."""
    from configobj import ConfigObj

    def remote(section: str) -> str:
        kind, _, name = section.partition(" ")
        return name.strip('"') if kind == "remote" and name else ""

    committed = dvc_dir / "config"
    known = {remote(s) for s in ConfigObj(str(committed))} if committed.is_file() else set()
    conf = ConfigObj(str(local))
    dropped = []
    for section in list(conf):
        name = remote(section)
        if name and name not in known and "url" not in conf[section]:
            dropped.append(name)
            del conf[section]
    known |= {remote(s) for s in conf} - {""}
    if "core" in conf and conf["core"].get("remote") and conf["core"]["remote"] not in known:
        del conf["core"]["remote"]
    conf.filename = str(dvc_dir / "config.local")
    conf.write()
    return dropped


def prepare_clone(root: Path, rev: str, clone: Path, pull: bool) -> str:
    """Clone root at rev into clone and get its `dvc add`ed inputs; return the commit sha."""
    from stages.lib.io import StageError
    from tools.project import dvc, git

    try:
        sha = git(root, "rev-parse", "--verify", f"{rev}^{{commit}}").strip()
    except subprocess.CalledProcessError:
        raise StageError(f"verify: --rev {rev} is not a commit of this repository "
                         "(try `git log --oneline`).") from None
    git(clone.parent, "clone", "-q", "--no-checkout", str(root), clone.name)
    if subprocess.run(["git", "cat-file", "-e", sha], cwd=clone).returncode != 0:
        git(clone, "fetch", "-q", str(root), sha)  # a commit no branch or tag reaches
    git(clone, "checkout", "-q", "--detach", sha)
    local = root / ".dvc" / "config.local"  # credentials live here, never in git
    if local.is_file():
        copy_local_config(local, clone / ".dvc")
    tracked = [p for p in git(clone, "ls-files", "*.dvc").split("\n") if p]
    if not tracked:
        return sha
    if pull:
        preflight(clone)
        proc, source = dvc(clone, "pull", *tracked, check=False), "the DVC remote"
    else:
        # This working copy's cache has the remote layout (files/md5/..): read it as a remote,
        # so the clone copies what it needs into its own temp cache and never writes to ours.
        cache = dvc(root, "cache", "dir").stdout.strip()
        dvc(clone, "remote", "add", "--local", "workcache", cache)
        proc, source = dvc(clone, "pull", "-r", "workcache", *tracked, check=False), \
            "this working copy's DVC cache (rerun with --pull to use the remote)"
    if proc.returncode != 0:
        raise StageError(f"verify: could not get {', '.join(tracked)} from {source}; check "
                         f"the remote with `python -m tools.doctor`.\n{proc.stdout[-2000:]}"
                         f"{proc.stderr[-2000:]}")
    return sha


@click.command()
@click.option("--rev", default="HEAD", show_default=True,
              help="Commit (or branch, tag) whose dvc.lock to verify.")
@click.option("--pull", is_flag=True,
              help="Fetch the inputs from the DVC remote instead of this working copy's cache.")
@click.option("--stages", "stage_args", multiple=True, metavar="STAGE[,STAGE]",
              help="Verify only these stages (and re-run what they depend on). Repeatable or "
                   "comma-separated; default: every stage.")
@click.option("--tol", default=1e-6, show_default=True,
              help="Tolerance (absolute or relative) for metrics of an out that differs.")
@click.option("--keep", is_flag=True, help="Keep the temp clone and print its path.")
def main(rev, pull, stage_args, tol, keep):
    """Re-run the pipeline at REV in a clean clone and compare every out's hash with dvc.lock.

    Prints one row per out (stage, out, expected, got, verdict) and exits 1 when any out is
    not bit-identical. Verdicts: bit-identical; metrics equal within tolerance (the out's bytes
    differ but the stage's metrics agree to --tol: floating-point noise, e.g. another CPU);
    different; missing; not re-run (DVC skipped the stage); unsupported CPU (the lock was
    written under train.kernels portable and this CPU lacks AVX2/FMA or is not x86-64, so its
    float outs cannot be compared). Under portable every out must be bit-identical on any
    x86-64 CPU with AVX2. Uncommitted changes in the working copy are not part of REV.
    """
    import json

    import yaml

    from stages.lib.io import StageError
    from tools.project import dvc, git, lock_hashes

    try:
        root = Path(git(Path.cwd(), "rev-parse", "--show-toplevel").strip())
    except subprocess.CalledProcessError:
        raise StageError("verify: run it inside the project's git repository.") from None
    stages = sorted({s.strip() for arg in stage_args for s in arg.split(",") if s.strip()})
    tmp = Path(tempfile.mkdtemp(prefix="pipeline-verify-"))
    clone = tmp / "repo"
    try:
        sha = prepare_clone(root, rev, clone, pull)
        if not (clone / "dvc.lock").is_file():
            raise StageError(f"verify: commit {sha[:12]} has no dvc.lock: nothing to verify.")
        committed = lock_hashes(clone)
        lines, unsupported = profile_lines(lock_profile(clone))
        for line in lines:
            click.echo(line, err=True)
        lock = yaml.safe_load((clone / "dvc.lock").read_text())
        dvc_yaml = yaml.safe_load((clone / "dvc.yaml").read_text())
        unknown = [s for s in stages if s not in dvc_yaml.get("stages", {})]
        if unknown:
            raise StageError(f"verify: --stages {', '.join(unknown)}: no such stage in "
                             f"dvc.yaml (stages: {', '.join(dvc_yaml.get('stages', {}))}).")
        metric_paths = {p for s in lock.get("stages", {}) for p in stage_metrics(dvc_yaml, s)}
        committed_metrics = {p: json.loads((clone / p).read_text()) for p in metric_paths
                             if (clone / p).is_file()}
        selected = upstream(dvc_yaml, lock, stages) if stages else None
        click.echo(f"verify: commit {sha[:12]} in {clone}: dvc repro --force "
                   f"{' '.join(stages) or '(all stages)'}", err=True)
        # --no-run-cache: upstream stages must run, not be restored from DVC's run cache.
        start = time.monotonic()

        def progress(line):  # each stage as DVC starts it, on stderr (stdout: the table)
            if line.startswith("Running stage '"):
                click.echo(f"verify: stage {line.split(chr(39))[1]} "
                           f"({time.monotonic() - start:.0f}s)", err=True)

        proc = dvc(clone, "repro", "--force", "--no-run-cache", *stages, check=False,
                   progress=progress)
        if proc.returncode != 0:
            raise StageError(f"verify: `dvc repro` failed at {sha[:12]}:\n"
                             f"{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
        ran = set(re.findall(r"Running stage '([^']+)'", proc.stdout))
        rows = compare(committed, lock_hashes(clone), dvc_yaml, committed_metrics, clone, tol,
                       ran, selected)
    finally:
        if keep:
            click.echo(f"verify: kept {clone}", err=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if unsupported:  # not a difference of the pipeline's: this CPU cannot run the profile
        for r in rows:
            if r["stage"] in FLOAT_STAGES and r["verdict"] != IDENTICAL:
                r["verdict"] = UNSUPPORTED
    click.echo(table(rows))
    if unsupported:
        click.echo(f"verify: this CPU is unsupported for the portable kernels: {unsupported}; "
                   "run verify on an x86-64 machine with AVX2 and FMA", err=True)
    bad = [r for r in rows if r["verdict"] != IDENTICAL]
    click.echo(f"verify: {len(rows) - len(bad)} of {len(rows)} outs bit-identical to dvc.lock "
               f"at {sha[:12]}" + (f"; not identical: {', '.join(r['out'] for r in bad)}"
                                   if bad else ""))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
