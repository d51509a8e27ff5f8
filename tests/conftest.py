import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def write_image(path, size=(16, 16), mode="L", fmt=None, seed=0):
    """A real image file with random pixels."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    channels = {"L": 1, "RGB": 3}[mode]
    pixels = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8).squeeze()
    Image.fromarray(pixels, mode).save(path, format=fmt)
    return path


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run the test from an empty temp directory (stages use project-relative paths)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def project(tmp_path):
    """A git-committed copy of the project's files (no data, no models) in a temp dir."""
    from tools.project import copy_project

    return copy_project(ROOT, tmp_path / "project")


def run_module(module, *args, cwd=None):
    """Run `python -m <module>` with this checkout first on the path; the CompletedProcess."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env,
                          capture_output=True, text=True)


def run_stage(name, *args, cwd=None):
    """Run `python -m stages.<name>` like DVC does; return the CompletedProcess."""
    return run_module(f"stages.{name}", *args, cwd=cwd)


def run_tool(name, *args, cwd=None):
    """Run `python -m tools.<name>` (predict, serve, verify, doctor, smoke)."""
    return run_module(f"tools.{name}", *args, cwd=cwd)


TINY_RUN = {"sample.per_class": 20, "train.epochs": 1}


def venv_elsewhere(link) -> Path:
    """The `python` of this test run's virtualenv reached through a symlink at `link`: a
    second venv path at no cost (a real second venv is 6 GB). Python derives sys.prefix, and
    so site-packages and every module's __file__, from the path it is started by, not from the
    resolved one; checked here, so a Python that resolves it fails instead of proving nothing."""
    import subprocess

    link = Path(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(sys.prefix, target_is_directory=True)
    python = link / Path(sys.executable).relative_to(sys.prefix)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True, text=True).stdout
    assert Path(purelib.strip()).is_relative_to(link), (purelib, link)
    return python


@pytest.fixture(scope="session")
def trained_project(tmp_path_factory):
    """A project copy on which `dvc repro` ran once with TINY_RUN (20 images per class, 1
    epoch), committed: a real models/model.pt, models/model.onnx, metrics, plots and report.
    Shared by every test that needs a run (session scope, one pipeline run); treat it as
    read-only, and take a `copy_run` of it to change anything."""
    from tools.project import copy_project, dvc, git

    dest = copy_project(ROOT, tmp_path_factory.mktemp("trained") / "project", params=TINY_RUN)
    proc = dvc(dest, "repro")
    assert re.findall(r"Running stage '([^']+)'", proc.stdout) == [
        "sample", "ingest", "validate", "split", "prepare", "train", "evaluate", "export",
        "report"]  # every stage, in order
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "tiny run")
    return dest


def copy_run(src, dest) -> Path:
    """An independent copy of a project and its run: git history, DVC cache, outs and
    file times (so DVC sees nothing changed), without DVC's temp state."""
    import shutil

    def skip(folder, names):
        return ["tmp"] if Path(folder) == Path(src) / ".dvc" else []

    shutil.copytree(src, dest, symlinks=True, ignore=skip)
    return Path(dest)


@pytest.fixture(scope="session")
def incremental_project(trained_project, tmp_path_factory):
    """Issue 15's fine-tuning flow on grown data: a copy of trained_project whose model.pt is
    kept as weights/v1.pt (`dvc add`), then the sample grown by 20% (20 -> 24 images per class)
    and `dvc repro` with train.init_from and evaluate.compare_with naming weights/v1.pt.
    Returns (old project, new project); read-only: take a copy_run to change anything."""
    import shutil

    from tools.project import dvc, git, set_params

    dest = copy_run(trained_project, tmp_path_factory.mktemp("incremental") / "project")
    shutil.copy2(dest / "models/model.pt", dest / "weights/v1.pt")
    dvc(dest, "add", "weights/v1.pt")
    set_params(dest, {"sample.per_class": 24, "train.init_from": "weights/v1.pt",
                      "evaluate.compare_with": "weights/v1.pt"})
    proc = dvc(dest, "repro")
    assert "Running stage 'train'" in proc.stdout and "Running stage 'evaluate'" in proc.stdout
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "fine-tuned on grown data")
    return trained_project, dest
