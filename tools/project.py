"""Copy the project into a scratch directory and run DVC there (smoke runs, tests, verify)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml


def project_files(root) -> list[str]:
    """Files git would commit: tracked plus untracked-but-not-ignored, relative to root."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                         check=True, capture_output=True, text=True).stdout
    return sorted(p for p in out.split("\0") if p and (Path(root) / p).is_file())


def copy_project(root, dest, params: dict | None = None, git_init: bool = True) -> Path:
    """Copy the project's files (not its data, models or venv) to dest, apply param overrides
    ({"train.epochs": 1, ...}) and commit them in a new git repository there."""
    dest = Path(dest)
    for rel in project_files(root):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(root) / rel, target)
    if params:
        set_params(dest, params)
        if "task" in params:
            follow_modality(dest)
    if git_init:
        git(dest, "init", "-q")
        git(dest, "config", "user.name", "pipeline")
        git(dest, "config", "user.email", "pipeline@localhost")
        git(dest, "add", "-A")
        git(dest, "commit", "-qm", "copy of the project")
    return dest


def git(cwd, *args) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "pipeline", "GIT_AUTHOR_EMAIL": "pipeline@localhost",
           "GIT_COMMITTER_NAME": "pipeline", "GIT_COMMITTER_EMAIL": "pipeline@localhost"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=env).stdout


def follow_modality(root) -> None:
    """A copy's params.yaml and dvc.yaml as its task's modality has them (an audio task:
    prepare.audio and validate.max_seconds where an image task has prepare.image_size and
    validate.max_pixels; stages/lib/door.py MODALITY_KEYS), as tools.init writes them."""
    from stages.lib.door import for_modality, other_keys, own_keys
    from stages.lib.params import defaults, task_of
    from stages.tasks import get

    params_file, dvc_file = Path(root) / "params.yaml", Path(root) / "dvc.yaml"
    params = yaml.safe_load(params_file.read_text())
    modality = get(task_of(params, params_file)).modality_name
    every = defaults()
    for dotted in own_keys(modality):
        section, key = dotted.split(".")
        params.setdefault(section, {}).setdefault(key, getattr(every[section], key))
    for dotted in other_keys(modality):
        section, key = dotted.split(".")
        params.get(section, {}).pop(key, None)
    params_file.write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True))
    dvc_file.write_text(for_modality(dvc_file.read_text(), modality))


def set_params(root, overrides: dict) -> None:
    """Apply {"task": "ocr", "train.epochs": 1, ...} to root/params.yaml (a key without a dot
    is a top-level one)."""
    path = Path(root) / "params.yaml"
    params = yaml.safe_load(path.read_text())
    for dotted, value in overrides.items():
        if "." not in dotted:
            params[dotted] = value
            continue
        section, key = dotted.split(".", 1)
        params.setdefault(section, {})[key] = value
    path.write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True))


def dvc(cwd, *args, check: bool = True, python=None, progress=None
        ) -> subprocess.CompletedProcess:
    """Run DVC with this interpreter's environment (or that of `python`, a path to another
    environment's interpreter) first on PATH, so stages find `python`.

    Output goes through temp files, not pipes: `dvc queue start` leaves worker daemons that
    inherit DVC's stdout, and a pipe would then stay open, and the call wait, until the last
    worker exits (seen: a worker idling on after the queue was empty). `progress`, when
    given, is called with each line of stdout while DVC runs (read back from the file)."""
    import tempfile
    import time

    python = str(python or sys.executable)
    bindir = str(Path(python).parent)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    with tempfile.NamedTemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([python, "-m", "dvc", *args], cwd=cwd, env=env, stdout=out,
                                stderr=err, text=True)
        if progress:  # a second open of the file: its own offset, not DVC's
            with open(out.name, encoding="utf-8", errors="replace") as follow:
                pending = ""
                while True:
                    done = proc.poll() is not None
                    pending += follow.read()
                    *lines, pending = pending.split("\n")
                    for line in lines:
                        progress(line)
                    if done:
                        break
                    time.sleep(0.2)
        proc.wait()
        out.seek(0)
        err.seek(0)
        proc.stdout, proc.stderr = out.read(), err.read()
    proc = subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        raise RuntimeError(f"dvc {' '.join(args)} failed ({proc.returncode}):\n"
                           f"{proc.stdout}\n{proc.stderr}")
    return proc


def lock_hashes(root) -> dict[tuple[str, str], str]:
    """{(stage, out path): md5} for every out in root/dvc.lock."""
    lock = yaml.safe_load((Path(root) / "dvc.lock").read_text())
    return {(stage, out["path"]): out["md5"]
            for stage, entry in lock["stages"].items() for out in entry.get("outs", [])}


STAGES_BEFORE_TRAIN = ("sample", "ingest", "validate", "split", "prepare")
