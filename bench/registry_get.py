"""One model on a new machine: `dvc artifacts get` against `git clone` + `dvc pull`.

    python -m bench.registry_get --project DIR      # a committed run (dvc repro done, committed)
    python -m bench.registry_get --task detection --set train.epochs=1   # builds the run first

With --task, the run is built first in a scratch folder: a copy of this project, `python -m
tools.init --task T` (the task's built-in sample), the --set overrides, `dvc repro`, commit.

It copies the run into a scratch folder, gives it a directory remote, pushes, registers the
artifact (`gto register`), and pushes git to a bare repository. Then, in empty folders, it times
(a) `dvc artifacts get BARE NAME --rev VERSION` and (b) `git clone BARE` + `dvc pull` of the same
commit, and counts the bytes each leaves on the new machine (and what (b) read from the DVC
remote: its cache). Prints both and the ratios. Each is run `--repeats` times; the best time.
"""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import yaml

ROOT = Path(__file__).resolve().parents[1]


def run(*args, cwd) -> None:
    subprocess.run(list(args), cwd=cwd, check=True, capture_output=True, text=True)


def size(path: Path) -> int:
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def build(task: str, overrides: tuple, folder: Path) -> Path:
    """A committed run of task's built-in sample in folder/project; prints its figures."""
    from tools.project import copy_project, dvc, git, set_params

    repo = copy_project(ROOT, folder / "project")
    run(sys.executable, "-m", "tools.init", "--task", task, cwd=repo)
    set_params(repo, {k: yaml.safe_load(v) for k, _, v in (o.partition("=") for o in overrides)})
    start = time.perf_counter()
    dvc(repo, "repro")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"{task} run")
    print(f"built: {task} sample, {', '.join(overrides) or 'its recipe'}: dvc repro "
          f"{time.perf_counter() - start:.0f} s; data/sample {size(repo / 'data/sample'):,} "
          f"bytes, data/processed {size(repo / 'data/processed'):,} bytes")
    return repo


@click.command()
@click.option("--project", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="A committed pipeline run (dvc.lock and its outs in cache).")
@click.option("--task", default=None,
              help="Instead of --project: build a run of this task's built-in sample first "
                   "(tools.init --task T, then dvc repro).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="With --task: a params override (YAML value), e.g. train.epochs=1.")
@click.option("--repeats", default=3, show_default=True, help="Runs of each; the best time.")
def main(project, task, overrides, repeats):
    """Time and bytes of one model by name vs a clone and pull of the same commit."""
    import os
    import shutil

    sys.path.insert(0, str(ROOT))
    from tests.conftest import copy_run

    if (project is None) == (task is None):
        raise click.UsageError("give --project DIR or --task T")
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    dvc = [sys.executable, "-m", "dvc"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if task:
            project = build(task, overrides, tmp / "built")
        repo = copy_run(project, tmp / "project")
        (tmp / "store").mkdir()
        run(*dvc, "remote", "add", "-d", "store", str(tmp / "store"), cwd=repo)
        run("git", "add", "-A", cwd=repo)
        run("git", "-c", "user.name=b", "-c", "user.email=b@l", "commit", "-qm", "remote",
            cwd=repo)
        run(*dvc, "push", "-q", cwd=repo)
        name = next(iter(yaml.safe_load((repo / "dvc.yaml").read_text())["artifacts"]))
        run(sys.executable, "-m", "gto.cli", "register", name, "--version", "v0.0.1", cwd=repo)
        run("git", "init", "-q", "--bare", str(tmp / "origin.git"), cwd=tmp)
        run("git", "push", "-q", str(tmp / "origin.git"), "HEAD", "--tags", cwd=repo)
        best = {"get": float("inf"), "clone": float("inf")}
        got = {}
        for i in range(repeats):
            a, b = tmp / f"get{i}", tmp / f"clone{i}"
            a.mkdir()
            start = time.perf_counter()
            run(*dvc, "artifacts", "get", str(tmp / "origin.git"), name, "--rev", "v0.0.1",
                "-o", "model.onnx", cwd=a)
            best["get"] = min(best["get"], time.perf_counter() - start)
            start = time.perf_counter()
            run("git", "clone", "-q", "--branch", f"{name}@v0.0.1", str(tmp / "origin.git"),
                str(b), cwd=tmp)
            run(*dvc, "pull", "-q", cwd=b)
            best["clone"] = min(best["clone"], time.perf_counter() - start)
            got = {"get": size(a), "clone": size(b), "pulled": size(b / ".dvc/cache")}
            shutil.rmtree(a)
            shutil.rmtree(b)
    print(f"dvc artifacts get: {best['get']:.2f} s, {got['get']:,} bytes on the new machine")
    print(f"git clone + dvc pull: {best['clone']:.2f} s, {got['clone']:,} bytes on the new "
          f"machine ({got['pulled']:,} read from the DVC remote into its cache)")
    print(f"ratio (clone+pull / get): time {best['clone'] / best['get']:.1f}x, bytes "
          f"{got['clone'] / got['get']:.1f}x")


if __name__ == "__main__":
    main()
