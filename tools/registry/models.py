"""predict and serve by name: `--model NAME@v1.2.0`, `NAME#prod` or `NAME` (the latest version),
from the registry of `--registry GIT_URL` (default: the git repository of the working
directory). See docs/registry.md.

- parse(): is --model a registry reference, or a plain file path (kept as before)?
- resolve(): which commit and file (dvc.api.artifacts_show, DVC's own choice of the version a
  stage or "latest" means), which version and stages (GTO's tags), the md5 the commit's
  dvc.lock records and the data version (the tag message register wrote).
- cached(): the file in the local model cache, keyed by that md5; fetched (and checked) only
  when absent, and its md5 checked again before every load: a corrupt object, in the remote
  or the cache, is an error naming the artifact and the hash, never a silently wrong model.

Only the standard library at import: gto and dvc load when a reference is resolved.
"""
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tools.registry import RegistryError

CACHE_ENV = "IMAGE_PIPELINE_MODEL_CACHE"
# gto.constants: an artifact name, optionally after its pipeline folder (pipelines/ocr:ocr)
REF = re.compile(r"^(?P<name>(?:[a-zA-Z0-9_./-]+:)?[a-zA-Z0-9](?:[a-zA-Z0-9/_-]*[a-zA-Z0-9])?)"
                 r"(?:@(?P<version>v\d+\.\d+\.\d+)|#(?P<stage>[a-zA-Z0-9](?:[a-zA-Z0-9-_]*"
                 r"[a-zA-Z0-9])?))?$")


@dataclass(frozen=True)
class Ref:
    name: str
    version: str | None = None
    stage: str | None = None

    def __str__(self) -> str:
        return self.name + (f"@{self.version}" if self.version else
                            f"#{self.stage}" if self.stage else "")


MAX_NAME = 200  # characters of a reference (GTO's names are far shorter)


def parse(text) -> Ref | None:
    """A registry reference, or None for a file path: an existing file, anything with a file
    suffix or a folder (models/model.onnx), is a path, as before. A missing path that holds
    `@` or `#`, whitespace at an end, a control or format character (U+202E), or is longer
    than MAX_NAME is a malformed reference: a RegistryError naming the forms (it would
    otherwise read as a missing file: "run the export stage first")."""
    import unicodedata

    if text is None or os.path.exists(text):
        return None
    text = str(text)
    m = REF.match(text)
    if m and len(text) <= MAX_NAME and not ("/" in m["name"] and ":" not in m["name"]):
        return Ref(m["name"], m["version"], m["stage"])
    odd = any(unicodedata.category(c)[0] in "CZ" and c != " " for c in text)
    if "@" in text or "#" in text or text != text.strip() or odd or len(text) > MAX_NAME:
        from tools.registry.safety import clip

        raise RegistryError(f"--model {clip(text)}: not a file, and not a registered model "
                            f"reference: give NAME@v1.2.0 (semver with a v), NAME#STAGE or "
                            f"NAME (letters, digits, - and _; at most {MAX_NAME} characters)")
    return None


def cache_root() -> Path:
    """$IMAGE_PIPELINE_MODEL_CACHE, else $XDG_CACHE_HOME/image-pipeline/models, else
    ~/.cache/image-pipeline/models."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "image-pipeline" / "models"


def default_registry() -> str:
    """The git repository the working directory is in (its top folder)."""
    proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise RegistryError("--model names a registered model, but the working directory is "
                            "not in a git repository: pass --registry GIT_URL (a path or any "
                            "URL git clone takes)")
    return proc.stdout.strip()


def resolve(ref: Ref, registry: str | None) -> dict:
    """What ref means now in registry: {artifact, version, stage, commit, data_version, path,
    md5, metrics, registry}. The commit is dvc.api.artifacts_show's; the version the GTO tag
    of that commit (the one asked for); stage the stages that version is in, comma-joined."""
    from dvc.api import DVCFileSystem

    from tools.registry.fetch import lock_md5, resolve as artifacts_show
    from tools.registry.message import parse as parse_message
    from tools.registry.safety import gto_versions, public

    registry = registry or default_registry()
    where = artifacts_show(registry, ref.name, ref.version, ref.stage)
    rev, path = where["rev"], where["path"]
    version = where.get("version") or ref.version  # a stage's: GTO's active version
    rows = [v for v in gto_versions(registry, ref.name)
            if v.get("registrations") and v["commit_hexsha"] == rev
            and (not version or v["version"] == version)]
    if not rows:
        raise RegistryError(f"artifact {ref}: commit {rev[:8]} has no registered version in "
                            f"{public(registry)}: register one (python -m tools.registry "
                            f"register)")
    def active(v) -> list:
        return sorted(s["stage"] for s in v.get("stages", []) if s.get("is_active"))

    if ref.stage:  # two versions of one commit: the one in the stage
        rows = [v for v in rows if ref.stage in active(v)] or rows
    row = rows[0] if version else max(rows, key=lambda v: semver(v["version"]))
    stages = active(row)
    facts = parse_message(row["registrations"][-1].get("message", ""))
    fs = DVCFileSystem(registry, rev=rev)
    md5 = lock_md5(fs, ref.name, rev, path, f"artifact {ref}")
    return {"artifact": ref.name, "version": row["version"],
            "stage": ref.stage or ",".join(stages), "commit": rev,
            "data_version": facts.get("data", ""), "path": path, "md5": md5,
            "metrics": facts.get("metrics") or None, "registry": registry, "_fs": fs}


def semver(version: str) -> tuple:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def cached(found: dict) -> Path:
    """The checked local copy of a resolved version: fetched into the cache (keyed by its md5)
    when absent, then its md5 checked against dvc.lock's, as before every load."""
    from tools.registry.fetch import download_checked, md5_of
    from tools.registry.safety import cache_error, cache_file, checked_md5

    want = checked_md5(found["md5"], "dvc.lock", found["commit"], found["path"])
    root = cache_root()
    dest = cache_file(root, want, found["path"])
    label = f"artifact {found['artifact']} {found['version']}"
    try:
        if dest.is_dir():
            raise IsADirectoryError(dest)
        if not dest.is_file():
            download_checked(found["_fs"], found["path"], want, dest, label, found["commit"])
        got = md5_of(dest)
    except OSError as exc:
        raise cache_error(root, dest, exc) from None
    if got != want:
        raise RegistryError(f"{label}: the cached copy {dest} has md5 {got}, but commit "
                            f"{found['commit'][:8]}'s dvc.lock records {want}: it is corrupt. "
                            f"Delete it (rm {dest}) to fetch it again")
    return dest


def fields(found: dict) -> dict:
    """The columns predict's rows carry for a registered model (and serve's answers)."""
    return {"artifact": found["artifact"], "artifact_version": found["version"],
            "stage": found["stage"], "commit": found["commit"],
            "data_version": found["data_version"]}


def fetch(text, registry: str | None) -> tuple[Path, dict]:
    """(local file, registry facts) for --model: a plain path is itself and {}; a reference
    is resolved, fetched once into the cache and checked."""
    ref = parse(text)
    if ref is None:
        if registry is not None:
            raise RegistryError(f"--registry is for a registered model (--model NAME@v1.2.0, "
                                f"NAME#prod or NAME), and {text} is a file path: drop "
                                f"--registry or name the model")
        return text, {}
    from tools.registry.safety import clean_clones

    with clean_clones():  # a bare or URL registry: DVC's clone and cache go after the fetch
        found = resolve(ref, registry)
        path = cached(found)
    return path, {**{k: v for k, v in found.items() if not k.startswith("_")},
                  "cached": str(path)}


def load(backend: str, text, registry: str | None, threads: int = 0):
    """tools.inference.load of --model, a file path or a registry reference (fetched, checked
    and loaded from the cache; its facts in model.registry)."""
    from tools.inference import load as load_file

    path, facts = fetch(text, registry)
    if facts and backend != "onnxruntime" and Path(path).suffix == ".onnx":
        raise RegistryError(f"artifact {facts['artifact']} {facts['version']} is an ONNX file "
                            f"({facts['path']}): serve it with --backend onnxruntime")
    model = load_file(backend, path, threads)
    model.registry = facts
    return model
