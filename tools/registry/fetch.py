"""`get`: one registered version's bytes, from any clone-able git URL, with their md5 checked.

`dvc artifacts get` writes whatever the remote returns: DVC does not re-hash a download (the
remote's `verify` option covers `dvc pull`/`fetch` into a cache, not `artifacts get`; tested in
tests/test_registry.py). So this resolves the version with dvc.api, reads the md5 the tagged
commit's dvc.lock records, downloads to a temp file beside the output, hashes it and renames it
into place only when the hashes agree: a missing or corrupt object is an error naming the
artifact, the version and the hash, and nothing is written.
"""
import os
import posixpath
from pathlib import Path

from tools.registry import RegistryError


def md5_of(path: Path) -> str:
    from tools.doctor_objects import md5_of as stream_md5

    with open(path, "rb") as f:
        return stream_md5(f)


def resolve(repo: str, name: str, version: str | None, stage: str | None) -> dict:
    """{"rev": commit, "path": file in the repo, "version": when known} of name at version /
    stage / the latest. A stage means the version GTO has active in it (dvc.api's own choice
    is the latest tag naming the stage, assigned or not: after `gto deprecate` it still
    answers the old version), and DVC's choice must agree with it, or nothing is used."""
    from tools.registry.safety import check_registry

    check_registry(repo)
    if not stage:
        return artifacts_show(repo, name, version, None)
    version = stage_version(repo, name, stage)
    where = artifacts_show(repo, name, version, None)
    try:
        dvc_choice = artifacts_show(repo, name, None, stage)["rev"]
    except RegistryError:
        dvc_choice = None
    if dvc_choice != where["rev"]:
        from tools.registry.safety import public

        raise RegistryError(
            f"stage {stage} of {name} in {public(repo)}: GTO has {version} (commit "
            f"{where['rev'][:8]}) in it, but DVC's latest tag naming the stage points at "
            + (f"commit {dvc_choice[:8]}" if dvc_choice else "no commit")
            + f"; refusing to guess: assign it again (gto assign {name} --version {version} "
              f"--stage {stage}) and push the tags")
    return {**where, "version": version}


def stage_version(repo: str, name: str, stage: str) -> str:
    """The version GTO has active in stage (the newest, when several are)."""
    import re

    from tools.registry.safety import gto_versions, public

    def semver(v: str) -> tuple:
        return tuple(int(p) for p in re.findall(r"\d+", v)[:3])

    active = [v["version"] for v in gto_versions(repo, name)
              if any(s.get("stage") == stage and s.get("is_active") for s in v.get("stages", []))]
    if not active:
        raise RegistryError(f"stage {stage} of {name} is assigned to no version in "
                            f"{public(repo)} (gto show {name}): assign one (gto assign {name} "
                            f"--version v1.2.0 --stage {stage})")
    return max(active, key=semver)


def artifacts_show(repo: str, name: str, version: str | None, stage: str | None) -> dict:
    """dvc.api.artifacts_show, its failures one line each (an unreachable registry is not a
    missing version)."""
    from dvc.api import artifacts_show as show
    from dvc.exceptions import DvcException
    from dvc.scm import SCMError

    from tools.registry.safety import clip, public, unreadable

    try:
        return dict(show(name, version=version, stage=stage, repo=repo))
    except SCMError as exc:  # a clone or a git read that failed: not "not found"
        raise unreadable(repo, exc) from None
    except (DvcException, AttributeError, TypeError, ValueError, KeyError) as exc:
        which = f"version {version}" if version else f"stage {stage}" if stage else "any version"
        shown = public(repo)
        if not isinstance(exc, DvcException):
            raise RegistryError(f"artifact {name} {which} in {shown}: DVC cannot read the "
                                f"commit's dvc.yaml or dvc.lock ({type(exc).__name__}: "
                                f"{clip(public(exc), 200)}); register a commit whose dvc.yaml "
                                f"and dvc.lock DVC wrote") from None
        raise RegistryError(f"artifact {name}: {which} not found in {shown} "
                            f"({public(' '.join(str(exc).split()))}): list the registered "
                            f"versions with `python -m tools.registry show --repo {shown}` "
                            f"or `gto show --repo {shown}`") from None


def lock_md5(fs, name: str, rev: str, path: str, label: str) -> str:
    """The md5 the dvc.lock of the artifact's pipeline (the root's, or pipelines/X/dvc.lock
    for pipelines/X:NAME) records at rev for path (repo-relative)."""
    from tools.registry.register import lock_outs

    folder = name.rpartition(":")[0]
    lock = posixpath.join(folder, "dvc.lock") if folder else "dvc.lock"
    relative = posixpath.relpath(path, folder) if folder else path
    from tools.registry.safety import checked_md5

    try:
        want = lock_outs(fs.read_text(lock)).get(relative)
    except FileNotFoundError:
        want = None
    if not want:
        raise RegistryError(f"{label}: the {lock} of commit {rev[:8]} records no {path}: "
                            f"that commit was registered without a pipeline run; register a "
                            f"commit whose dvc.lock has it")
    return checked_md5(want, lock, rev, path)


def download_checked(fs, path: str, want: str, out: Path, label: str, rev: str) -> None:
    """path's bytes from the DVC remote (through fs, a DVCFileSystem at rev) to out, renamed
    into place only when their md5 is want; nothing is written otherwise."""
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


def get(repo: str, name: str, version: str | None, stage: str | None, out: Path) -> dict:
    """Write name's bytes at version/stage/latest to out; what was fetched (rev, path, md5)."""
    from dvc.api import DVCFileSystem

    from tools.registry.safety import clean_clones

    with clean_clones():  # a bare or URL registry: DVC's clone and cache go with the command
        where = resolve(repo, name, version, stage)
        label = f"artifact {name} {version or (f'#{stage}' if stage else 'latest')}"
        rev, path = where["rev"], where["path"]
        fs = DVCFileSystem(repo, rev=rev)
        want = lock_md5(fs, name, rev, path, label)
        download_checked(fs, path, want, out, label, rev)
    return {"artifact": name, "rev": rev, "path": path, "md5": want, "out": str(out)}
