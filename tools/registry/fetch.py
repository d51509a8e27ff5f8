"""`get`: one registered version's bytes, from any clone-able git URL, with their md5 checked.

`dvc artifacts get` writes whatever the remote returns: DVC does not re-hash a download (the
remote's `verify` option covers `dvc pull`/`fetch` into a cache, not `artifacts get`; tested in
tests/test_registry_get.py). So this resolves the version with dvc.api, reads the md5 the tagged
commit's dvc.lock records, downloads to a temp file beside the output, hashes it and renames it
into place only when the hashes agree: a missing or corrupt object is an error naming the
artifact, the version and the hash, and nothing is written.
"""
import os
from pathlib import Path

from tools.registry import RegistryError


def md5_of(path: Path) -> str:
    from tools.doctor_objects import md5_of as stream_md5

    with open(path, "rb") as f:
        return stream_md5(f)


def resolve(repo: str, name: str, version: str | None, stage: str | None) -> dict:
    """{"rev": commit, "path": file in the repo} of name at version / stage / the latest."""
    from dvc.api import artifacts_show
    from dvc.exceptions import DvcException

    try:
        return artifacts_show(name, version=version, stage=stage, repo=repo)
    except DvcException as exc:
        which = f"version {version}" if version else f"stage {stage}" if stage else "any version"
        raise RegistryError(f"artifact {name}: {which} not found in {repo} ({exc}): list the "
                            f"registered versions with `python -m tools.registry show --repo "
                            f"{repo}` or `gto show --repo {repo}`") from None


def get(repo: str, name: str, version: str | None, stage: str | None, out: Path) -> dict:
    """Write name's bytes at version/stage/latest to out; what was fetched (rev, path, md5)."""
    from dvc.api import DVCFileSystem

    from tools.registry.register import lock_outs, split_name

    where = resolve(repo, name, version, stage)
    label = f"artifact {name} {version or (f'#{stage}' if stage else 'latest')}"
    rev, path = where["rev"], where["path"]
    fs = DVCFileSystem(repo, rev=rev)
    folder = split_name(name)[0]  # a pipeline's artifact: its folder's dvc.lock
    inside = Path(path).relative_to(folder).as_posix() if folder != Path(".") else path
    want = lock_outs(fs.read_text((folder / "dvc.lock").as_posix())).get(inside)
    if not want:
        raise RegistryError(f"{label}: the dvc.lock of commit {rev[:8]} records no {path}: "
                            f"that commit was registered without a pipeline run; register a "
                            f"commit whose dvc.lock has it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.part")
    try:
        try:
            fs.get_file(path, str(tmp))
        except FileNotFoundError:
            raise RegistryError(f"{label}: {path} (md5 {want}, commit {rev[:8]}) is not in the "
                                f"DVC remote: run `dvc push` in a clone at that commit, or "
                                f"check the remote's URL and credentials") from None
        got = md5_of(tmp)
        if got != want:
            raise RegistryError(f"{label}: the remote's copy of {path} has md5 {got}, but "
                                f"commit {rev[:8]}'s dvc.lock records {want}: the object in "
                                f"the remote is corrupt. Nothing was written to {out}; push "
                                f"the good file again from a clone that has it (dvc push)")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return {"artifact": name, "rev": rev, "path": path, "md5": want, "out": str(out)}
