"""Where a result came from: the run record every train/evaluate writes, and stable hashes.

The run record (logs/<stage>.json, not tracked by DVC or git) holds what must never enter a
cached out: the git commit and dirty flag, versions, the device and the command line.
Hashes of data and params are deterministic and may go into outs.
"""
import dataclasses
import hashlib
import json
import platform
import subprocess
import sys
from pathlib import Path

from stages.lib.io import sha256_file, write_json

LOG_DIR = Path("logs")
MANIFEST = Path("data/manifest.csv")
LOCK_FILE = Path("requirements.lock")


def params_hash(params) -> str:
    """sha256 of a params dataclass (or dict), independent of key order."""
    data = dataclasses.asdict(params) if dataclasses.is_dataclass(params) else params
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def git_state(root=".") -> dict:
    """{"git_commit": sha or "", "git_dirty": bool or None} of the repository at root."""
    def run(*args):  # no optional locks: `git status` never rewrites the index (.git/index.lock)
        return subprocess.run(["git", "--no-optional-locks", *args], cwd=root,
                              capture_output=True, text=True)

    head = run("rev-parse", "HEAD")
    if head.returncode != 0:
        return {"git_commit": "", "git_dirty": None}
    dirty = bool(run("status", "--porcelain", "--untracked-files=no").stdout.strip())
    return {"git_commit": head.stdout.strip(), "git_dirty": dirty}


def run_record(stage: str, params) -> dict:
    """Everything needed to explain a run; call after torch is imported if the stage uses it."""
    record = {
        "stage": stage,
        "command": sys.argv,
        **git_state(),
        "manifest_sha256": sha256_file(MANIFEST, missing=""),
        "requirements_lock_sha256": sha256_file(LOCK_FILE, missing=""),
        "params": dataclasses.asdict(params) if dataclasses.is_dataclass(params) else params,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        cuda = torch.cuda.is_available()
        record.update(torch=torch.__version__, cuda=torch.version.cuda,
                      device=torch.cuda.get_device_name(0) if cuda else platform.processor()
                      or platform.machine(),
                      threads=torch.get_num_threads())
    return record


def write_run_record(stage: str, record: dict) -> Path:
    path = LOG_DIR / f"{stage}.json"
    write_json(path, record)
    return path
