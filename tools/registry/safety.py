"""What the registry reads is checked before it is used, and what it shows gives nothing away
(issue 54): a `--registry` that is no repository, a tag that points at a missing commit, a
dvc.lock md5 that is no md5, a cache path that leaves the cache, a cache that cannot be
written are each one line naming the registry, tag or path and the fix; a URL's userinfo
(`https://user:token@host/repo.git`) is never shown or logged; DVC's clones of an external
registry are removed once a command is done with them.

Only the standard library at import.
"""
import contextlib
import os
import re
import subprocess
from pathlib import Path, PurePosixPath

from tools.registry import RegistryError, public  # noqa: F401 - public: shared here

MD5 = re.compile(r"^[0-9a-f]{32}$")
URL = re.compile(r"(?i)^[a-z][a-z0-9+.-]*://|^[^/\s]+@[^/\s]+:")  # scheme://, or user@host:path
SHOWN = 120  # characters of an echoed user value in a message


def public_facts(facts: dict) -> dict:
    """A registered model's facts for a public answer (GET /model): no cache path, the
    registry's URL without userinfo and no local registry path."""
    out = {k: v for k, v in facts.items() if k not in ("metrics", "cached", "registry")}
    registry = facts.get("registry")
    if registry and is_url(str(registry)):
        out["registry"] = public(registry)
    return out


def clip(text, limit: int = SHOWN) -> str:
    """A user's value for a message: ascii() escapes (a U+202E or a newline shows as such),
    cut to limit characters with its length."""
    shown = ascii(str(text))[1:-1]
    return shown if len(shown) <= limit else f"{shown[:limit]}… ({len(str(text))} characters)"


def is_url(registry: str) -> bool:
    return bool(URL.match(registry))


def check_registry(registry: str) -> str:
    """registry, when it can be a git repository: a local path must be a folder in a git
    repository (a file, a missing path or a plain folder is refused, one line with the fix);
    a URL is left to the clone."""
    if is_url(registry):
        import logging

        # dulwich's HTTP client retries through urllib3, which logs each retry as a warning:
        # the error that follows says it in one line
        logging.getLogger("urllib3").setLevel(logging.ERROR)
        return registry
    where = Path(registry)
    fix = "give the registry's repository folder or a URL git clone takes"
    if not where.exists():
        raise RegistryError(f"--registry {clip(registry)}: no such folder; {fix}")
    if not where.is_dir():
        raise RegistryError(f"--registry {clip(registry)}: a file, not a git repository; {fix}")
    proc = subprocess.run(["git", "-C", str(where), "rev-parse", "--git-dir"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RegistryError(f"--registry {clip(registry)}: not a git repository; {fix}")
    return registry


def broken_tags(registry: str) -> list[str]:
    """The tags of a local registry whose commit is missing (empty for a URL)."""
    if is_url(registry):
        return []
    refs = subprocess.run(["git", "-C", registry, "for-each-ref", "--format=%(refname:short)",
                           "refs/tags"], capture_output=True, text=True).stdout.split()
    if not refs:
        return []
    check = subprocess.run(["git", "-C", registry, "cat-file", "--batch-check"],
                           input="".join(f"refs/tags/{r}^{{commit}}\n" for r in refs),
                           capture_output=True, text=True).stdout.splitlines()
    return [r for r, line in zip(refs, check, strict=False) if line.endswith(" missing")]


def unreadable(registry: str, exc: BaseException) -> RegistryError:
    """The one-line error for a registry GTO or DVC could not read (exc: theirs)."""
    broken = broken_tags(registry)
    if broken:
        return RegistryError(f"registry {public(registry)}: tag {clip(broken[0])} points at a "
                             f"commit that is not in the repository, and GTO reads every tag: "
                             f"delete it (git tag -d {broken[0]}) or fetch its commit")
    why = " ".join(public(str(exc) or type(exc).__name__).split())
    return RegistryError(f"registry {public(registry)}: cannot read it ({type(exc).__name__}: "
                         f"{clip(why, 300)}): check that it is a git repository you can clone "
                         f"(the URL, your network and credentials)")


def gto_versions(registry: str, name: str) -> list[dict]:
    """GTO's versions of name in registry (gto.api.show), its failures one line each."""
    from gto.api import show
    from gto.exceptions import GTOException

    try:
        return show(registry, name, table=False)
    except (GTOException, OSError) as exc:
        raise unreadable(registry, exc) from None
    except Exception as exc:  # noqa: BLE001 - scmrepo's SCMError and what it wraps
        if type(exc).__module__.split(".")[0] in ("scmrepo", "dvc", "dulwich", "pygit2"):
            raise unreadable(registry, exc) from None
        raise


def checked_md5(value, lock: str, rev: str, path: str) -> str:
    """dvc.lock's md5 of path, which must be 32 lowercase hex digits (it becomes a cache path)."""
    if not isinstance(value, str) or not MD5.match(value):
        raise RegistryError(f"the {lock} of commit {rev[:8]} records md5 {clip(value, 40)} for "
                            f"{clip(path)}: not an md5 (32 lowercase hex digits); register a "
                            f"commit whose dvc.lock DVC wrote")
    return value


def cache_file(root: Path, md5: str, path: str) -> Path:
    """root/md5[:2]/md5[2:]/NAME for the artifact's path (NAME its plain file name), checked to
    lie under root."""
    name = PurePosixPath(str(path)).name
    if name in ("", ".", "..") or "\\" in name or "\0" in name or not MD5.match(md5):
        raise RegistryError(f"the registry's artifact path {clip(path)} has no plain file name "
                            f"(models/model.onnx); fix the artifact's path in its dvc.yaml")
    base = Path(os.path.abspath(root))
    dest = base / md5[:2] / md5[2:] / name
    if os.path.commonpath([os.path.abspath(dest), base]) != str(base):
        raise RegistryError(f"model cache: {clip(path)} would be written outside {base}")
    return dest


def cache_error(root: Path, dest: Path, exc: OSError) -> RegistryError:
    """The one-line error for a model cache that cannot hold dest."""
    if isinstance(exc, IsADirectoryError) or dest.is_dir():
        return RegistryError(f"model cache: {dest} is a folder, not the model file: remove it "
                             f"(rm -r {dest}) to fetch the model again")
    why = exc.strerror or type(exc).__name__
    return RegistryError(f"model cache {root}: cannot write {dest} ({why}); make the cache a "
                         f"writable folder, or point IMAGE_PIPELINE_MODEL_CACHE at one")


@contextlib.contextmanager
def clean_clones():
    """DVC's clones and caches of external repositories (dvc.api on a bare or URL registry)
    removed on the way out: the DVC CLI does this at exit, a dvc.api caller must."""
    try:
        yield
    finally:
        import sys

        if "dvc.repo.open_repo" in sys.modules:
            from dvc.repo.open_repo import clean_repos

            clean_repos()
