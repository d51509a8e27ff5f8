"""`register NAME VERSION`: the refusals GTO does not make, and the facts of the tag message.

A version must be reproducible from its commit alone: dvc.lock matches the outs (`dvc status`
clean), every out is in the default remote (a new machine can fetch it), and the working tree
is the commit (nothing uncommitted that the version would silently leave out). Every problem
is collected and printed, one line each, naming the fix; then GTO writes the annotated tag.
"""
import json
import subprocess
import sys
from pathlib import Path

import yaml

from tools.registry import RegistryError

MODEL = "models/model.onnx"
DATA = "data/manifest.csv"  # the data version: ingest's manifest (every file's sha256 and label)
SPLIT = "data/split"


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True)


def dvc(*args) -> subprocess.CompletedProcess:
    return run(sys.executable, "-m", "dvc", *args)


def split_name(name: str) -> tuple[Path, str]:
    """(folder of its dvc.yaml, name in it) of an artifact: `ocr` is the root's,
    `pipelines/ocr:ocr` that of pipelines/ocr/dvc.yaml (tools.init --into; GTO's and DVC's
    spelling; the tags write `pipelines/ocr=ocr@v1.0.0`)."""
    folder, sep, short = name.rpartition(":")
    return (Path(folder) if sep else Path("."), short)


def declared(root: Path = Path(".")) -> dict:
    """{name: declaration} of dvc.yaml's `artifacts:`."""
    return (yaml.safe_load((root / "dvc.yaml").read_text()) or {}).get("artifacts") or {}


def lock_outs(text: str) -> dict:
    """{out path: md5} of a dvc.lock's text."""
    lock = yaml.safe_load(text) or {}
    return {out["path"]: out.get("md5") for entry in (lock.get("stages") or {}).values()
            for out in entry.get("outs", [])}


def problems(folder: Path = Path(".")) -> list[str]:
    """Each reason to refuse the working tree's commit, as one line with its fix; DVC's
    checks cover the pipeline of folder's dvc.yaml (the root's: every pipeline)."""
    found = []
    status = run("git", "--no-optional-locks", "status", "--porcelain")
    if status.returncode != 0:
        return ["not a git repository: run register from the project's root"]
    if status.stdout.strip():
        files = sorted({line[3:] for line in status.stdout.splitlines()})
        found.append(f"uncommitted changes in {', '.join(files[:5])}"
                     f"{' ...' if len(files) > 5 else ''}: commit them (git add -A && git "
                     f"commit) or stash them (git stash -u), then register")
    targets = [] if folder == Path(".") else [(folder / "dvc.yaml").as_posix()]
    local = dvc("status", "--json", *targets)
    changed = sorted(json.loads(local.stdout or "{}")) if local.returncode == 0 else None
    if changed is None:
        found.append(f"dvc status failed: {local.stderr.strip().splitlines()[-1:]}: fix the "
                     f"pipeline until `dvc status` runs")
    elif changed:
        found.append(f"dvc.lock does not match the outs of {', '.join(changed)} (dvc status): "
                     f"run `dvc repro` and commit dvc.lock, then register")
    remote = dvc("config", "core.remote")
    if remote.returncode != 0 or not remote.stdout.strip():
        found.append("no default DVC remote, so no other machine can fetch this version: add "
                     "one (dvc remote add -d NAME URL), commit .dvc/config and `dvc push`")
    else:
        cloud = dvc("status", "--cloud", "--json", *targets)
        if cloud.returncode != 0:
            found.append(f"the default remote '{remote.stdout.strip()}' cannot be read "
                         f"(dvc status --cloud: {cloud.stderr.strip().splitlines()[-1:]}): "
                         f"check its URL and credentials (docs/machines.md)")
        else:
            listed = sorted(p for p, s in json.loads(cloud.stdout or "{}").items()
                            if s in ("new", "missing"))  # a folder's files are listed too
            absent = [p for p in listed if not any(p.startswith(f"{d}/") for d in listed)]
            if absent:
                found.append(f"{len(absent)} outs are not in the default remote "
                             f"'{remote.stdout.strip()}' ({', '.join(absent[:3])}"
                             f"{' ...' if len(absent) > 3 else ''}): run `dvc push` first")
    return found


def recipe_diff(raw: dict) -> dict:
    """{dotted key: value} of params.yaml that differ from the task's recipe: the defaults
    (stages/lib/params.py) with the task's sample_params on the built-in sample, else its
    recipe (tools/init.py sets the same)."""
    from stages.tasks import get
    from tools.init import defaults
    from tools.params_text import flat

    now = flat(raw)
    task = get(now.get("task") or "classification")
    own = now.get("data.source", "data/sample") != "data/sample"
    expected = {**defaults(), **(task.recipe if own else task.sample_params)}
    return {key: value for key, value in sorted(now.items())
            if key not in ("task", "data.source") and expected.get(key, object()) != value}


def facts(root: Path = Path(".")) -> dict:
    """The message's facts from the working tree (the commit: register refuses otherwise)."""
    from stages.tasks import get

    raw = yaml.safe_load((root / "params.yaml").read_text()) or {}
    task = get(raw.get("task") or "classification")
    outs = lock_outs((root / "dvc.lock").read_text())
    metrics = json.loads((root / "metrics/eval.json").read_text())
    numbers = {k: round(v, 6) for k, v in metrics.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    head = task.headline_metric
    train = raw.get("train") or {}
    return {"headline": f"{head} {numbers[head]}" if head in numbers else "",
            "metrics": numbers, "data": outs.get(DATA, "none"), "split": outs.get(SPLIT, "none"),
            "kernels": f"{train.get('kernels', 'portable')}, "
                       f"{train.get('threads', 2)} threads",
            "params": recipe_diff(raw)}


def register(name: str, version: str) -> str:
    """Register HEAD as name@version (refusals first); the created tag's name."""
    from tools.registry.message import compose

    if not Path("dvc.yaml").is_file():
        raise RegistryError("dvc.yaml not found: run register from the project's root")
    folder, short = split_name(name)
    if not (folder / "dvc.yaml").is_file():
        raise RegistryError(f"{name}: no {(folder / 'dvc.yaml').as_posix()}: name a pipeline "
                            f"folder's artifact as FOLDER:NAME (pipelines/ocr:ocr)")
    names = declared(folder)
    if short not in names:
        raise RegistryError(f"{name} is not an artifact of {(folder / 'dvc.yaml').as_posix()} "
                            f"(artifacts: {', '.join(sorted(names)) or 'none'}): register one of "
                            f"those, or declare it (python -m tools.init --task T writes the "
                            f"task's)")
    path = names[short].get("path", MODEL)
    if names[short].get("type") == "dataset":
        return register_dataset(name, version, folder / path)
    lock = folder / "dvc.lock"
    found = problems(folder)
    if not found and not (lock.is_file() and lock_outs(lock.read_text()).get(path)):
        found.append(f"dvc.lock records no {path} for {name}: run `dvc repro`, commit "
                     f"dvc.lock and `dvc push`, then register")
    refuse(name, version, found)
    return tag(name, version, compose(name, version, facts(folder)))


def dataset_facts(path: Path) -> dict:
    """The message's facts of a dataset `dvc add`ed at path: its md5 (the data version) and
    its file count, from path.dvc."""
    dvcfile = Path(f"{path}.dvc")
    outs = (yaml.safe_load(dvcfile.read_text()) or {}).get("outs") or [{}] \
        if dvcfile.is_file() else [{}]
    md5 = str(outs[0].get("md5", ""))
    files = outs[0].get("nfiles")
    return {"headline": f"{files} files" if files is not None else "", "metrics": {},
            "data": md5 or "none", "split": "none", "kernels": "none", "params": {}}


def register_dataset(name: str, version: str, path: Path) -> str:
    """Register HEAD as the dataset name@version: path is tracked by `dvc add` (path.dvc),
    committed and pushed; the tag message holds its md5 and file count."""
    from tools.registry.message import compose

    found = problems(Path("."))
    if not Path(f"{path}.dvc").is_file():
        found.append(f"{path.as_posix()} is not tracked by `dvc add` (no {path.as_posix()}.dvc):"
                     f" run `dvc add {path.as_posix()}`, commit the .dvc file and `dvc push`")
    refuse(name, version, found)
    return tag(name, version, compose(name, version, dataset_facts(path)))


def refuse(name: str, version: str, found: list[str]) -> None:
    """Raise one RegistryError listing every problem found, one line each with its fix."""
    if found:
        raise RegistryError(f"refusing to register {name} {version}:\n"
                            + "\n".join(f"  {line}" for line in found))


def tag(name: str, version: str, message: str) -> str:
    """GTO's annotated tag of HEAD as name@version; its name."""
    from gto.api import register as gto_register
    from gto.exceptions import GTOException

    try:
        gto_register(".", name, ref="HEAD", version=version, message=message)
    except GTOException as exc:
        raise RegistryError(f"gto refused {name} {version}: {exc}") from None
    return f"{name.replace(':', '=')}@{version}"  # GTO's tag: pipelines/ocr=ocr@v1.0.0
