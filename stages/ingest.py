"""Inventory an ImageFolder tree into data/manifest.csv: one row per file, never a silent skip.

Every file under `data.source` (except hidden ones) gets a row with its path relative to the
source, its label (the class folder), size, sha256 and what a full decode found. Files that are
not images become rows with an `error`; validate decides what to do with them.
"""
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import click

from stages.lib.io import StageError, write_csv
from stages.lib.params import load, params_option

MANIFEST = Path("data/manifest.csv")
FIELDS = ["path", "label", "bytes", "sha256", "format", "width", "height", "mode", "error"]


def list_files(root: Path) -> list[str]:
    """Relative POSIX paths of every non-hidden file under root, sorted."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if not name.startswith("."):
                found.append((Path(dirpath) / name).relative_to(root).as_posix())
    return sorted(found)


def inspect_file(root: str, rel: str) -> dict:
    from stages.lib.images import inspect_image, sha256_file

    path = Path(root) / rel
    parts = rel.split("/")
    row = {"path": rel, "label": parts[0] if len(parts) > 1 else "", "bytes": path.stat().st_size}
    row["sha256"] = sha256_file(path)
    row.update(inspect_image(path))
    if not row["label"]:
        row["error"] = row["error"] or "not inside a class folder: move it to <source>/<class>/"
    return row


def build_manifest(root: Path, workers: int = 0) -> list[dict]:
    from tqdm import tqdm

    files = list_files(root)
    workers = workers or os.cpu_count() or 1
    roots = [str(root)] * len(files)
    with ProcessPoolExecutor(workers) as pool:
        rows = list(tqdm(pool.map(inspect_file, roots, files, chunksize=64), total=len(files),
                         desc="ingest", unit="file", disable=None))
    return rows


@click.command()
@params_option
def main(params_path):
    """Hash and decode every file under `data.source` and write data/manifest.csv.

    Reads `data.source` and `ingest.workers` (0 = all cores) from the params file.
    """
    source = Path(load("data", params_path).source)
    if not source.is_dir():
        raise StageError(
            f"data.source: {source} is not a folder. Point data.source in params.yaml at an "
            f"ImageFolder tree (<source>/<class>/<image>)."
        )
    rows = build_manifest(source, load("ingest", params_path).workers)
    if not rows:
        raise StageError(f"data.source: {source} holds no files; add <class>/<image> files.")
    write_csv(MANIFEST, rows, FIELDS)
    bad = sum(1 for r in rows if r["error"])
    click.echo(f"ingest: {len(rows)} files from {source}/ -> {MANIFEST} ({bad} with errors)")


if __name__ == "__main__":
    main()
