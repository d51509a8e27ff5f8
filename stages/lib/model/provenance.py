"""Where a result came from: the run record every train/evaluate writes, and stable hashes.

The run record (logs/<stage>.json, not tracked by DVC or git) holds what must never enter a
cached out: the git commit and dirty flag, versions, the device and the command line.
Hashes of data and params are deterministic and may go into outs: `export_provenance` gives
the ones models/model.onnx's metadata carries, the model's version (`model_version`) among
them.
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
ROOT = Path(__file__).resolve().parents[3]  # the code's folder: the project root, also when a
# pipeline of pipelines/NAME/ runs with its own folder as the working directory
LOCK_FILE = ROOT / "requirements.lock"
# The params that shaped the model (data, split, preprocessing, training) and its export.
PROVENANCE_PARAMS = ("data", "split", "prepare", "train", "export")
# The knobs of the other formats never change model.onnx: they stay out of its params hash, so
# selecting a format leaves model.onnx's bytes as they were.
FORMAT_KEYS = ("formats", "max_metric_drop", "calibration_samples")


VERSION_CHARS = 12  # hex digits of a model version


def model_version(weights_sha256: str) -> str:
    """The model's version: the first VERSION_CHARS hex digits of the sha256 of its trained
    weights (models/model.pt). One string for one trained model everywhere: export writes it
    into model.onnx's metadata (`model_version`, carried by every format converted from it),
    predict's rows carry it (`model`), serve answers it (`model_version`, GET /model's
    `version`) and the report shows it, whichever backend or format runs the model."""
    return weights_sha256[:VERSION_CHARS]


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


def registry_state(root=".") -> list[dict]:
    """[{"artifact", "version", "stages"}] registered at HEAD: GTO's git tags (NAME@v1.2.0 for a
    version, NAME#STAGE#N for a stage: the highest N of a (NAME, STAGE) is the active one).
    Git facts: for the untracked experiments page only, never for an out."""
    proc = subprocess.run(["git", "--no-optional-locks", "for-each-ref", "refs/tags",
                           "--format=%(refname:strip=2) %(*objectname) %(objectname)"],
                          cwd=root, capture_output=True, text=True)
    head = git_state(root)["git_commit"]
    if proc.returncode != 0 or not head:
        return []
    versions, stages = {}, {}
    for line in proc.stdout.splitlines():
        tag, peeled, obj = (line.split(" ") + ["", ""])[:3]
        commit = peeled or obj
        name, at, version = tag.partition("@")
        if at and commit == head:
            versions.setdefault(name, []).append(version)
        parts = tag.split("#")
        if len(parts) in (2, 3):
            number = int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else 0
            best = stages.get((parts[0], parts[1]))
            if best is None or number > best[0]:
                stages[(parts[0], parts[1])] = (number, commit)
    return [{"artifact": name.replace("=", ":"), "version": ", ".join(sorted(found)),
             "stages": sorted(s for (n, s), (_, c) in stages.items() if n == name and c == head)}
            for name, found in sorted(versions.items())]


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


def export_provenance(params: dict, task: str, model) -> dict:
    """Deterministic hashes of the code, data manifest, params and weights (the file `model`)
    behind an export. The code: every project file the export stage reaches for the task, read
    from its imports (stages.lib.codedeps), the files dvc.yaml's export deps cover."""
    from stages.lib.codedeps import code_hash
    from stages.lib.door import asdict
    from stages.lib.params import without_placement

    # prepare's placement keys (workers, engine, ray_address) are not part of the result
    sections = {s: without_placement(s, asdict(params[s]))
                for s in PROVENANCE_PARAMS}
    for key in FORMAT_KEYS:
        del sections["export"][key]
    if not sections["export"]["width_buckets"]:  # the default: hashed as before it existed
        del sections["export"]["width_buckets"]
    if not sections["prepare"]["width_buckets"]:
        del sections["prepare"]["width_buckets"]
    if sections["prepare"]["letterbox"] == "auto":  # the default: hashed as before it existed
        del sections["prepare"]["letterbox"]
    if sections["export"]["score_threshold"] is None:  # the default (evaluate's): likewise
        del sections["export"]["score_threshold"]
    hashes = {s: params_hash(values) for s, values in sections.items()}
    hashes["task"] = params_hash({"task": task})
    weights = sha256_file(model, missing="")
    return {"code_sha256": code_hash("export", task, ROOT),
            "manifest_sha256": sha256_file(MANIFEST, missing=""),
            "params_sha256": params_hash(hashes), "model_sha256": weights,
            "model_version": model_version(weights)}
