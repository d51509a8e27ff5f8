"""Train-and-evaluate runs of the real stages on a built-in sample, for the quality benches
(bench/detect_quality.py, bench/ema.py).

A sample project is copied and run up to prepare once (`prepared`); each run is then a folder
beside it holding its own params.yaml, its data/ a link to the prepared one and its code links
to this checkout's stages/ and tools/, so runs share the decoded data and change nothing here.
"""
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def prepared(workdir: Path, params: dict) -> Path:
    """workdir/project: a copy of this project with params (task and the sample's), run up to
    the prepare stage (kept when it is already there with the same params)."""
    from tools.project import copy_project, dvc

    project = Path(workdir) / "project"
    made = project / "bench-params.json"
    wanted = json.dumps(params, sort_keys=True)
    if not made.is_file() or made.read_text() != wanted:
        shutil.rmtree(project, ignore_errors=True)
        copy_project(ROOT, project, params=params)
        dvc(project, "repro", "prepare")
        made.write_text(wanted)
    return project


def stage(folder: Path, name: str) -> float:
    """Run `python -m stages.<name>` in folder: its CPU seconds (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", f"stages.{name}"], cwd=folder,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(folder)})
    if done.returncode:
        raise SystemExit(f"{name} failed in {folder}:\n{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run(project: Path, name: str, overrides: dict) -> dict:
    """Train and evaluate in a folder `name` beside project with params overrides: the test
    metrics (metrics/eval.json) and the train stage's CPU seconds (`cpu`)."""
    from tools.project import set_params

    folder = project.parent / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    shutil.copy2(project / "params.yaml", folder / "params.yaml")
    for rel in ("data", "stages", "tools"):
        (folder / rel).symlink_to(project / rel if rel == "data" else ROOT / rel)
    set_params(folder, overrides)
    cpu = stage(folder, "train")
    stage(folder, "evaluate")
    return {**json.loads((folder / "metrics" / "eval.json").read_text()), "cpu": cpu}


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())
