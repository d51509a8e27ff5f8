"""What changed in the data since the last run: files added, removed and changed.

The last run's facts are the manifest whose md5 dvc.lock records (ingest's out, or validate's
dep): the lock is read before DVC rewrites it, and the manifest's bytes come back from DVC's
cache by that md5. Nothing new is versioned and no out depends on it: the changes are printed
and written to the untracked run record logs/changes-<stage>.json, so every out stays a pure
function of its deps and `dvc repro` reproduces dvc.lock as before (docs/registry.md, data
versions). A first run, a run outside DVC or a cache without the object: no previous facts.
"""
import csv
import io
from pathlib import Path

LOCK = Path("dvc.lock")
MANIFEST = "data/manifest.csv"
SHOWN = 20  # paths printed per kind; the run record lists them all


def locked_md5(stage: str, section: str, path: str = MANIFEST, lock: Path = LOCK) -> str:
    """The md5 the lock records for path among stage's deps or outs ("" when none)."""
    import yaml

    try:
        entry = (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).get(stage) or {}
    except (OSError, yaml.YAMLError):
        return ""
    return next((str(o.get("md5", "")) for o in entry.get(section, [])
                 if o.get("path") == path), "")


def cached_bytes(md5: str) -> bytes | None:
    """The bytes of DVC's cache object md5, from the repository around the working directory."""
    if not md5:
        return None
    try:
        from dvc.repo import Repo

        with Repo(".", uninitialized=False) as repo:
            path = repo.cache.local.oid_to_path(md5)
        return Path(path).read_bytes()
    except Exception:  # noqa: BLE001 - no repo, no cache, no object: no previous facts
        return None


def rows_of(data: bytes) -> dict:
    """{path: row} of a manifest's bytes."""
    return {r["path"]: r for r in csv.DictReader(io.StringIO(data.decode("utf-8")))}


def previous(stage: str, section: str) -> dict | None:
    """{"md5", "rows"} of the manifest the last run of stage saw, or None."""
    md5 = locked_md5(stage, section)
    data = cached_bytes(md5)
    return None if data is None else {"md5": md5, "rows": rows_of(data)}


def compare(old: dict, new_rows: list) -> dict:  # both as read from the csv: strings
    """{"added", "removed", "changed"}: sorted paths of new_rows against old's rows; a file
    changed when a column both manifests have differs (its bytes, annotations, facts)."""
    new = {r["path"]: r for r in new_rows}

    def differs(path):
        a, b = old[path], new[path]
        return any(a[c] != b[c] for c in set(a) & set(b))

    return {"added": sorted(set(new) - set(old)), "removed": sorted(set(old) - set(new)),
            "changed": sorted(p for p in set(new) & set(old) if differs(p))}


def report(stage: str, before: dict | None, new_rows: list, log_dir: Path = Path("logs")
           ) -> list[str]:
    """The lines saying what changed (also written to logs/changes-<stage>.json)."""
    from stages.lib.io import write_json

    if before is None:
        return [f"{stage}: changes: no earlier run to compare with (no manifest in dvc.lock "
                f"or DVC's cache)"]
    found = compare(before["rows"], new_rows)
    write_json(log_dir / f"changes-{stage}.json", {"previous_manifest_md5": before["md5"],
                                                   **found})
    counts = ", ".join(f"{len(v)} {k}" for k, v in found.items())
    lines = [f"{stage}: since the last run (manifest {before['md5'][:12]}): {counts}"]
    for kind, paths in found.items():
        if paths:
            more = f" ... ({len(paths) - SHOWN} more in logs/changes-{stage}.json)" \
                if len(paths) > SHOWN else ""
            lines.append(f"{stage}:   {kind}: {', '.join(paths[:SHOWN])}{more}")
    return lines


def dataset_version(source) -> dict:
    """{"name", "rev", "url"} of data.source when a registry put it there: `dvc import URL PATH
    --rev NAME@v2.0.0` records the rev in source.dvc (`dvc update --rev` moves it); {} else."""
    import yaml

    dvcfile = Path(f"{source}.dvc")
    try:
        deps = (yaml.safe_load(dvcfile.read_text()) or {}).get("deps") or []
    except (OSError, yaml.YAMLError):
        return {}
    repo = next((d.get("repo") for d in deps if isinstance(d.get("repo"), dict)), None)
    if not repo:
        return {}
    return {"name": str(deps[0].get("path", "")), "rev": str(repo.get("rev") or ""),
            "commit": str(repo.get("rev_lock") or ""), "url": str(repo.get("url", ""))}
