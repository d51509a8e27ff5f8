"""Several pipelines in one repository: `python -m tools.init --task T --into pipelines/NAME`.

The folder gets its own params.yaml (the root's, then set up for T by init as usual),
dvc.yaml (the root's nine stages, with every path relative to the folder: its data/, models/,
metrics/, plots/ and reports/ are its own; the code deps, stages/ and requirements.lock, point
at the root's), a .gitignore for its run records, and weights/none (the no-weights placeholder
train.init_from and evaluate.compare_with name by default). The artifact is named after the
folder: `pipelines/NAME:NAME` for DVC and GTO (tags `pipelines/NAME=NAME@v1.0.0`).

A stage runs with the folder as its working directory (DVC's rule), so its command puts the
root on the import path (`PYTHONPATH=../.. python -m stages.X`); the stages read the root's
code and requirements.lock from where the package is (stages/lib/model/provenance.py ROOT), so every
out is byte for byte what the same params give at the root (tests/test_pipelines.py).
"""
import os
import re
import shutil
from pathlib import Path

import click

OWN_DIRS = ("data", "models", "metrics", "plots", "reports")
IGNORE = "# run records and local pages: not versioned (the root's .gitignore, for this folder)\n" \
         "/logs/\n/reports/experiments.html\n"


def up(into: Path) -> str:
    """The relative path from the folder back to the root: ../.. for pipelines/NAME."""
    return "/".join([".."] * len(into.parts))


def folder_dvc_yaml(root_text: str, into: Path) -> str:
    """The root's dvc.yaml text for a pipeline in `into`: code deps and commands reach the
    root, everything else is relative to the folder. Comments are kept."""
    back = up(into)
    text = re.sub(r"^(\s+cmd: )python -m stages\.", rf"\1PYTHONPATH={back} python -m stages.",
                  root_text, flags=re.M)
    text = re.sub(r"^(\s+- )((?:stages|requirements\.lock)(?:/\S*)?)(\s|:|$)",
                  rf"\1{back}/\2\3", text, flags=re.M)
    head = (f"# The pipeline of {into.as_posix()} (python -m tools.init --into, "
            f"docs/registry.md): the root's\n# stages run here, on this folder's params.yaml "
            f"and data; its code is the root's stages/.\n")
    return head + text


def make_folder(into: Path, force: bool) -> bool:
    """Create the pipeline folder from the root's files; True when it was created now (its
    params.yaml is then new, not a user's to protect). An existing pipeline (its dvc.yaml) is
    kept and set up again, its params.yaml guarded like the root's."""
    from stages.lib.io import write_bytes

    if into.is_absolute() or ".." in into.parts or not into.parts:
        raise click.ClickException(f"--into {into}: give a folder inside the project, relative "
                                   f"to its root (pipelines/NAME)")
    if (into / "dvc.yaml").is_file():
        return False
    if into.exists() and any(into.iterdir()) and not force:
        raise click.ClickException(f"--into {into}: the folder exists and is not a pipeline (no "
                                   f"dvc.yaml): pick a new folder, or --force to set one up in it")
    into.mkdir(parents=True, exist_ok=True)
    write_bytes(into / "dvc.yaml", folder_dvc_yaml(Path("dvc.yaml").read_text(), into).encode())
    shutil.copyfile("params.yaml", into / "params.yaml")
    (into / "weights").mkdir(exist_ok=True)
    shutil.copyfile(Path("weights/none"), into / "weights/none")
    write_bytes(into / ".gitignore", IGNORE.encode())
    for name in OWN_DIRS:
        (into / name).mkdir(exist_ok=True)
    return True


def source_from(source: Path, home: Path) -> Path:
    """source (given relative to the root, where init runs) as seen from the pipeline folder:
    ../../data/mine, or its absolute path when outside the project."""
    resolved = source.resolve()
    try:
        resolved.relative_to(home.resolve())
    except ValueError:
        return resolved
    return Path(os.path.relpath(resolved, Path.cwd().resolve()))
