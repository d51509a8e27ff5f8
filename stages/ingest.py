"""Inventory an image tree into data/manifest.csv: one row per file, never a silent skip.

Every file under `data.source` (except hidden ones and DVC's machinery) gets a row with its path
relative to the source, its label, size, sha256 and what a full decode found (format, size,
mode, frames, bit depth, transparency, a perceptual hash). Labels come from the class folder
(`<source>/<class>/<image>`) or, when `<source>/labels.csv` exists, from its `path,label`
columns (plus optional `group` and `timestamp`). Files that cannot be used become rows with an
`error`; empty class folders become a row too. validate decides what to do with them.

Re-ingesting an unchanged tree rehashes nothing: facts are cached per (path, size, mtime_ns) in
.cache/ingest/ (gitignored, not a DVC out), with the last run's listing and rows, which are
reused whole when the listing (every path, kind, size and mtime, labels.csv's included) is the
same. The cache only saves work; the manifest's bytes are the same with or without it.
"""
import contextlib
import gc
import hashlib
import io
import marshal
import os
import stat
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import click

from stages.lib.io import StageError, read_csv, write_bytes, write_csv
from stages.lib.params import load, params_option

MANIFEST = Path("data/manifest.csv")
CACHE_DIR = Path(".cache/ingest")
LABELS = "labels.csv"
FIELDS = ["path", "label", "bytes", "sha256", "format", "width", "height", "mode", "error",
          "frames", "bits", "alpha", "phash", "group", "timestamp"]
FACTS = ["bytes", "sha256", "format", "width", "height", "mode", "error", "frames", "bits",
         "alpha", "phash"]


def list_files(root: Path) -> list[str]:
    """Relative POSIX paths of every non-hidden file (and file symlink) under root, sorted."""
    return sorted(rel for rel, kind, _ in walk(root) if kind == "file")


def walk(root: Path) -> list[tuple]:
    """(relative path, kind, key) for every entry to inventory: "file" (key: [size, mtime_ns],
    of a symlink's target), "empty" for a folder with no visible entries, "dirlink" for a
    symlinked folder (never followed); key None for the last two."""
    out, folders = [], [(os.fspath(root), "")]
    while folders:
        path, prefix = folders.pop()
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)  # stat by name in it: fewer lookups
        except OSError as exc:
            raise StageError(f"{path}: cannot list this folder ({exc.strerror}); make it "
                             f"readable or move it out of data.source.") from None
        try:
            with os.scandir(fd) as it:
                entries = [e for e in it if not e.name.startswith(".")]
            if prefix and not entries:
                out.append((prefix, "empty", None))
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    folders.append((os.path.join(path, e.name), f"{prefix}{e.name}/"))
                elif e.is_symlink() and e.is_dir():
                    out.append((prefix + e.name, "dirlink", None))
                else:
                    out.append((prefix + e.name, "file", stat_key(e)))
        finally:
            os.close(fd)
    return out


def inspect_file(root: str, rel: str, max_pixels: int = 0) -> dict:
    """The facts of one file (the FACTS columns). Runs in a worker process."""
    from stages.lib.images import CHUNK, inspect_image, sha256_file

    path = os.path.join(root, rel)  # plain strings: pathlib costs more than a small file's hash
    row = dict.fromkeys(FACTS, "")
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        target = Path(path).resolve()
        if not target.is_relative_to(Path(root).resolve()):
            # No target in the message: outs never hold absolute paths.
            row["error"] = "symlink escapes data.source: it points outside the source folder"
            return row
        if not target.is_file():
            row["error"] = "broken symlink: its target does not exist"
            return row
        st = os.stat(path)
    row["bytes"] = st.st_size
    if row["bytes"] <= CHUNK:  # one chunk: read once, hash and decode the same bytes
        with open(path, "rb") as f:
            data = f.read()
        row["sha256"] = hashlib.sha256(data).hexdigest()
        source = io.BytesIO(data)
    else:
        row["sha256"] = sha256_file(path)
        source = Path(path)
    if row["bytes"] == 0:
        row["error"] = "empty file: 0 bytes"
        return row
    row.update(inspect_image(source, max_pixels))
    return row


_JOB = {}  # a worker's (root, max_pixels), set once by the pool's initializer


def start_worker(root: str, max_pixels: int) -> None:
    _JOB["args"] = (root, max_pixels)


def inspect_batch(rels: list[str]) -> list[tuple]:
    """inspect_file for a batch of files, each row as a tuple in FACTS order: one task and one
    small pickle per batch instead of a dict per file."""
    root, max_pixels = _JOB["args"]
    out = []
    for rel in rels:
        row = inspect_file(root, rel, max_pixels)
        out.append(tuple(row[k] for k in FACTS))
    return out


def batches(todo: list[str], workers: int) -> list[list[str]]:
    """Consecutive batches of up to 64 files, at least 16 per worker when there are few."""
    size = max(1, min(64, len(todo) // (workers * 16)))
    return [todo[i:i + size] for i in range(0, len(todo), size)]


def read_labels(root: Path) -> dict[str, dict] | None:
    """{path: {label, group, timestamp}} from <root>/labels.csv, or None when there is none."""
    path = root / LABELS
    if not path.is_file():
        return None
    rows = read_csv(path)
    if not rows or not {"path", "label"} <= set(rows[0]):
        raise StageError(f"{path}: needs a header with `path,label` (and optionally `group`, "
                         f"`timestamp`) and one row per image.")
    seen = {}
    for r in rows:
        if r["path"] in seen:
            raise StageError(f"{path}: `{r['path']}` is listed twice; keep one row per file.")
        seen[r["path"]] = {k: (r.get(k) or "").strip() for k in ("label", "group", "timestamp")}
    return seen


def cache_file(root: Path, max_pixels: int) -> Path:
    """One cache per (source folder, max_pixels, inspection code, Python version: the file is
    in marshal's format): any change starts afresh."""
    here = Path(__file__).parent
    code = b"".join(m.read_bytes() for m in (here / "ingest.py", here / "lib/images.py"))
    salt = f"{root.resolve()}\0{max_pixels}\0{sys.version}\0".encode()
    return CACHE_DIR / f"{hashlib.sha256(salt + code).hexdigest()[:24]}.marshal"


def read_cache(path) -> dict:
    """The last run at this cache: {"listing": walk's output, "rows": the manifest rows,
    "facts": {path: FACTS values}}; {} when missing or unreadable. marshal, not JSON: it loads
    2x faster, and the file is only ever written by this stage, atomically."""
    try:
        data = marshal.loads(Path(path).read_bytes())
        if (data["fields"] == FIELDS and data["facts_fields"] == FACTS
                and isinstance(data["listing"], list) and isinstance(data["rows"], list)
                and isinstance(data["facts"], dict)):
            return data
    except (OSError, ValueError, EOFError, TypeError, KeyError):
        pass
    return {}


def reusable(last: dict, keys: dict) -> dict:
    """{path: facts} from the last run, for files whose [size, mtime_ns] is unchanged. A
    damaged entry is just a miss."""
    try:
        before = {rel: key for rel, kind, key in last.get("listing", ()) if kind == "file"}
    except (TypeError, ValueError):
        return {}
    return {rel: facts for rel, facts in last.get("facts", {}).items()
            if keys.get(rel, False) == before.get(rel)
            and isinstance(facts, (list, tuple)) and len(facts) == len(FACTS)}


def stat_key(entry: os.DirEntry) -> list:
    try:
        st = entry.stat()  # through a symlink: its target's size and mtime
    except OSError:
        st = entry.stat(follow_symlinks=False)
    return [st.st_size, st.st_mtime_ns]


@contextlib.contextmanager
def no_gc():
    """The garbage collector off while tens of thousands of small acyclic lists and dicts are
    built (cache entries, rows): otherwise it walks them all again and again, which costs more
    than building them. Never around the worker pool: forked workers would inherit it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def inventory(root: Path, workers: int = 0, max_pixels: int = 0, cache: Path | None = None):
    """(manifest rows sorted by path, stats) for the tree at root.

    stats: {"files": n, "inspected": files hashed and decoded this time, "cached": reused}.
    """
    labels = read_labels(root)
    with no_gc():
        listing = walk(root)  # labels.csv included: a change to it changes the rows
        last = read_cache(cache) if cache else {}
        entries = [e for e in listing if labels is None or e[0] != LABELS]
        keys = {rel: key for rel, kind, key in entries if kind == "file"}
        if last and last["listing"] == listing:  # nothing changed: the same rows
            return last["rows"], {"files": len(keys), "inspected": 0, "cached": len(keys)}
        facts = reusable(last, keys)
    todo = [rel for rel in keys if rel not in facts]
    if todo:
        from tqdm import tqdm

        import stages.lib.images  # noqa: F401  imported once here, inherited by forked workers

        workers = workers or os.cpu_count() or 1
        todo.sort(key=lambda rel: (-keys[rel][0], rel))  # largest first: no straggler at the end
        jobs = batches(todo, workers)
        with (ProcessPoolExecutor(workers, initializer=start_worker,
                                  initargs=(str(root), max_pixels)) as pool,
              tqdm(total=len(todo), desc="ingest", unit="file", disable=None) as bar):
            for batch, rows in zip(jobs, pool.map(inspect_batch, jobs), strict=True):
                facts.update(zip(batch, rows, strict=True))
                bar.update(len(batch))
    with no_gc():
        rows = [make_row(rel, kind, facts.get(rel), labels) for rel, kind, _ in entries]
        listed = {e[0] for e in entries}
        for rel in sorted(set(labels or ()) - listed):
            rows.append(make_row(rel, "missing", None, labels))
        rows.sort(key=lambda r: r["path"])
        if cache:
            write_bytes(cache, marshal.dumps({  # strings shared with the rows are stored once
                "fields": FIELDS, "facts_fields": FACTS, "listing": listing, "rows": rows,
                "facts": {rel: facts[rel] for rel in keys}}))
    return rows, {"files": len(keys), "inspected": len(todo), "cached": len(keys) - len(todo)}


EMPTY = dict.fromkeys(FIELDS, "")
BLANK = ("",) * len(FACTS)


def make_row(rel: str, kind: str, facts, labels: dict | None) -> dict:
    """The manifest row of one entry; facts: the FACTS values in order, or None."""
    if labels is None:  # the class folder
        top, sep, _ = rel.rstrip("/").partition("/")
        label, group, timestamp = (top if sep or kind == "empty" else ""), "", ""
    else:
        given = labels.get(rel, EMPTY)
        label, group, timestamp = given["label"], given["group"], given["timestamp"]
    row = dict(zip(FIELDS, (rel, label, *(facts or BLANK), group, timestamp), strict=True))
    if kind == "empty":
        row["error"] = "empty class folder: it holds no files; remove it or add images"
    elif kind == "dirlink":
        row["error"] = "symlinked folder: not followed; replace it with a real folder"
    elif kind == "missing":
        row["error"] = f"missing: listed in {LABELS} but not found under data.source"
    elif not row["label"] and not row["error"]:
        row["error"] = ("unlabelled: not inside a class folder; move it to <source>/<class>/"
                        if labels is None else f"unlabelled: no label in {LABELS}")
    return row


def build_manifest(root: Path, workers: int = 0, max_pixels: int = 0) -> list[dict]:
    """Manifest rows for root, without the cache."""
    return inventory(Path(root), workers, max_pixels)[0]


@click.command()
@params_option
@click.option("--no-cache", is_flag=True,
              help="Hash and decode every file again instead of reusing .cache/ingest/ facts "
                   "for files whose size and mtime are unchanged (the manifest is the same).")
def main(params_path, no_cache):
    """Hash and decode every file under `data.source` and write data/manifest.csv.

    Reads `data.source`, `ingest.workers` (0 = all cores) and `validate.max_pixels` (larger
    images are never decoded) from the params file.
    """
    source = Path(load("data", params_path).source)
    if not source.is_dir():
        raise StageError(
            f"data.source: {source} is not a folder. Point data.source in params.yaml at an "
            f"ImageFolder tree (<source>/<class>/<image>)."
        )
    max_pixels = load("validate", params_path).max_pixels
    cache = None if no_cache else cache_file(source, max_pixels)
    rows, stats = inventory(source, load("ingest", params_path).workers, max_pixels, cache)
    if not rows:
        raise StageError(f"data.source: {source} holds no files; add <class>/<image> files.")
    write_csv(MANIFEST, rows, FIELDS)
    bad = sum(1 for r in rows if r["error"])
    click.echo(f"ingest: {len(rows)} files from {source}/ -> {MANIFEST} ({bad} with errors; "
               f"{stats['inspected']} hashed, {stats['cached']} unchanged from the cache)")


if __name__ == "__main__":
    main()
