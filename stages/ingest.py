"""Inventory a dataset into data/manifest.csv: one row per file, never a silent skip.

Every file under `data.source` (except hidden ones and DVC's machinery) gets a row with its path
relative to the source, the task's annotation columns (for classification: its label, from the
class folder or labels.csv), its size, sha256 and what the task's modality found in a full
decode (its FIELDS; images: format, size, mode, frames, bit depth, transparency, a perceptual
hash). Files that cannot be used get an `error` and a machine-readable `error_kind` (the
validate check that blocks them); annotation problems (an unlabelled file, an empty class
folder, a listed file that is missing) become rows too. Files the task reads as annotations
(labels.csv) are not inventoried as inputs. validate decides what to do with every row.

Re-ingesting an unchanged tree rehashes nothing: facts are cached per (path, size, mtime_ns) in
.cache/ingest/ (gitignored, not a DVC out), with the last run's listing and rows, which are
reused whole when the listing (every path, kind, size and mtime, annotation files included) is
the same. The cache only saves work; the manifest's bytes are the same with or without it.
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

from stages.lib.data import changes
from stages.lib import safefs, show
from stages.lib.io import HASH_CHUNK, StageError, read_csv, write_bytes, write_csv
from stages.lib.params import params_option

MANIFEST = Path("data/manifest.csv")
CACHE_DIR = Path(".cache/ingest")


def facts_of(modality) -> list[str]:
    """The facts of a file (its manifest columns but path and the annotations): its size and
    sha256, then what the modality's inspect finds (its FIELDS, error_kind and error among
    them)."""
    return ["bytes", "sha256", *modality.FIELDS]


def manifest_fields(task) -> list[str]:
    """The manifest's columns: path, the task's annotation columns, the facts, group, timestamp,
    split (the dataset's own split, when it has one: split.by given)."""
    return ["path", *task.annotation_fields, *facts_of(task.modality), "group", "timestamp",
            "split"]


def list_files(root: Path) -> list[str]:
    """Relative POSIX paths of every non-hidden file (and file symlink) under root, sorted."""
    return sorted(rel for rel, kind, _ in walk(root) if kind == "file")


SPECIAL = {  # walk's "special" entries: (error_kind, error); never opened
    "fifo": ("not_regular", "a FIFO (named pipe), not a file: never opened; remove it from "
                            "data.source (DVC would block hashing it)"),
    "socket": ("not_regular", "a socket, not a file: never opened; remove it from data.source"),
    "device": ("not_regular", "a device, not a file: never opened; remove it from data.source"),
    "loop": ("symlink", "symlink loop: it points back to itself (directly or through other "
                        "links); remove it"),
    "unlistable": ("unreadable", "a folder that cannot be listed (permission or I/O error): "
                                 "make it readable or move it out of data.source"),
}


def special_kind(mode: int) -> str | None:
    """SPECIAL's key for a stat mode that is neither a regular file nor a folder."""
    kind = safefs.mode_kind(mode)
    return None if kind in ("file", "folder") else kind if kind in SPECIAL else "device"


def walk(root: Path) -> list[tuple]:
    """(relative path, kind, key) for every entry to inventory: "file" (key: [size, mtime_ns,
    ctime_ns, inode], of a symlink's target), "empty" for a folder with no visible entries,
    "dirlink" for a symlinked folder (never followed), "special" for a FIFO, socket, device,
    symlink loop or a folder that cannot be listed (key: SPECIAL's key; never opened). Every
    entry is classified by fstatat on its folder's descriptor (stages.lib.safefs.walk), never
    by opening it."""
    out = []
    for e in safefs.walk(root):
        if e.kind == "unlistable":
            if e.rel:  # a subfolder: a row, so the quarantine can deal with it
                out.append((e.rel, "special", "unlistable"))
                continue
            raise StageError(f"{e.path}: cannot list this folder ({e.error.strerror}); make "
                             f"it readable or move it out of data.source.") from None
        if e.kind == "empty" and e.rel:
            out.append((f"{e.rel}/", "empty", None))
        elif e.kind == "dirlink":
            out.append((e.rel, "dirlink", None))
        elif e.kind == "loop":
            out.append((e.rel, "special", "loop"))
        elif e.kind in ("file", "special", "broken"):
            st = e.st
            kind = special_kind(st.st_mode) if e.kind == "special" else None
            out.append((e.rel, "special", kind) if kind else
                       (e.rel, "file", [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]))
    refuse_undecodable(root, [rel for rel, _, _ in out])
    return out


def undecodable_names(rels) -> list[str]:
    """The first path component that is not UTF-8 of each of rels (a folder once), sorted."""
    from stages.lib.show import undecodable

    found = set()
    for rel in rels:
        if undecodable(rel):
            parts = rel.rstrip("/").split("/")
            k = next(i for i, part in enumerate(parts) if undecodable(part))
            found.add("/".join(parts[:k + 1]))
    return sorted(found)


def refuse_undecodable(root, rels) -> None:
    """A StageError naming (escaped) every file or folder under root whose name is not UTF-8:
    the manifest (UTF-8) cannot hold it and DVC cannot hash it."""
    from stages.lib.show import some

    bad = undecodable_names(rels)
    if bad:
        raise StageError(f"{root}: {len(bad)} file or folder name(s) that are not UTF-8 (a byte "
                         f"that is not UTF-8 shown as \\xNN): {some(bad, 10)}. Rename each to "
                         f"UTF-8 (mv OLD NEW, or convmv -f latin1 -t utf8 -r --notest "
                         f"{root}); neither the manifest nor DVC can hold such a name.")


def inspect_file(root: str, rel: str, limit: int, modality) -> dict:
    """The facts of one file (facts_of(modality)'s columns). Runs in a worker process. A file
    that cannot be read is a row with error_kind `unreadable`, never an exception."""
    path = os.path.join(root, rel)  # plain strings: pathlib costs more than a small file's hash
    facts = facts_of(modality)
    row = dict.fromkeys(facts, "")
    try:
        return inspect_path(root, path, row, limit, modality)
    except OSError as exc:  # no permission, an I/O error, a loop made since the listing
        row.update(dict.fromkeys(facts, ""), error_kind="unreadable",
                   error=f"cannot read: {exc.strerror or type(exc).__name__}; make it readable "
                         f"or remove it")
        return row


def inspect_path(root: str, path: str, row: dict, limit: int, modality) -> dict:
    from stages.lib.userfiles import escapes

    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        try:
            escaping = escapes(root, path)
        except (OSError, RuntimeError):  # RuntimeError: pathlib's "Symlink loop"
            row.update(error_kind="symlink", error=SPECIAL["loop"][1])
            return row
        if escaping:
            # No target in the message: outs never hold absolute paths.
            row.update(error_kind="symlink",
                       error="symlink escapes data.source: it points outside the source folder")
            return row
        if not os.path.exists(path):
            row.update(error_kind="symlink", error="broken symlink: its target does not exist")
            return row
    # Non-blocking, then fstat before a byte is read: a FIFO swapped in since the listing
    # is never read from (a blocking open would wait for a writer forever).
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        kind = special_kind(st.st_mode)
        if kind:
            row.update(zip(("error_kind", "error"), SPECIAL[kind], strict=True))
            return row
        os.set_blocking(fd, True)
        row["bytes"] = st.st_size
        if row["bytes"] <= HASH_CHUNK:  # one chunk: read once, hash and decode the same bytes
            data = f.read()
            row["sha256"] = hashlib.sha256(data).hexdigest()
            source = io.BytesIO(data)
        else:
            digest = hashlib.sha256()
            while chunk := f.read(HASH_CHUNK):
                digest.update(chunk)
            row["sha256"] = digest.hexdigest()
            source = Path(path)
    if row["bytes"] == 0:
        row.update(error_kind="empty", error="empty file: 0 bytes")
        return row
    row.update(modality.inspect(source, limit))
    return row


_JOB = {}  # a worker's (root, limit, modality), set once by the pool's initializer


def start_worker(root: str, limit: int, modality_name: str) -> None:
    from stages.lib.modality import get

    _JOB["args"] = (root, limit, get(modality_name))


def inspect_batch(rels: list[str]) -> list[tuple]:
    """inspect_file for a batch of files, each row as a tuple in facts_of order: one task and
    one small pickle per batch instead of a dict per file."""
    root, limit, modality = _JOB["args"]
    facts = facts_of(modality)
    out = []
    for rel in rels:
        row = inspect_file(root, rel, limit, modality)
        out.append(tuple(row[k] for k in facts))
    return out


def batches(todo: list[str], workers: int) -> list[list[str]]:
    """Consecutive batches of up to 64 files, at least 16 per worker when there are few."""
    size = max(1, min(64, len(todo) // (workers * 16)))
    return [todo[i:i + size] for i in range(0, len(todo), size)]


def cache_file(root: Path, limit: int, task, max_boxes: int = 0) -> Path:
    """One cache per (source folder, limit, max_boxes, task, the ingest stage's code for the
    task (stages.lib.codedeps), Python version: the file is in marshal's format): any change
    starts afresh."""
    from stages.lib.codedeps import code_hash

    code = code_hash("ingest", task.name).encode()
    salt = f"{root.resolve()}\0{limit}\0{max_boxes}\0{task.name}\0{sys.version}\0".encode()
    return CACHE_DIR / f"{hashlib.sha256(salt + code).hexdigest()[:24]}.marshal"


def read_cache(path, fields, facts: list) -> dict:
    """The last run at this cache: {"listing": walk's output, "rows": the manifest rows,
    "facts": {path: the `facts` values}}; {} when missing or unreadable. marshal, not JSON: it
    loads 2x faster, and the file is only ever written by this stage, atomically."""
    try:
        data = marshal.loads(Path(path).read_bytes())
        if (data["fields"] == fields and data["facts_fields"] == facts
                and isinstance(data["listing"], list) and isinstance(data["rows"], list)
                and isinstance(data["facts"], dict)):
            return data
    except (OSError, ValueError, EOFError, TypeError, KeyError):
        pass
    return {}


def racy(key, since_ns) -> bool:
    """A file modified in the same second as (or after) the run that cached it started: its
    cached facts may predate a change that left size, mtime (at a coarse timestamp) and ctime
    as they were, so it is hashed again (git's racy-timestamp rule)."""
    return not isinstance(since_ns, int) or key[1] // 10**9 >= since_ns // 10**9


def reusable(last: dict, keys: dict, count: int) -> dict:
    """{path: facts} from the last run, for files whose [size, mtime_ns, ctime_ns, inode] is
    unchanged and not racy (count: how many facts a file has). A damaged entry is just a
    miss."""
    try:
        before = {rel: key for rel, kind, key in last.get("listing", ()) if kind == "file"}
    except (TypeError, ValueError):
        return {}
    since = last.get("started_ns")
    return {rel: facts for rel, facts in last.get("facts", {}).items()
            if keys.get(rel, False) == before.get(rel) and not racy(keys[rel], since)
            and isinstance(facts, (list, tuple)) and len(facts) == count}


SAMPLE = 16  # verify_cache: sample rehashes SAMPLE files plus 1% of the cached ones


def verify_cached(root: Path, facts: dict, mode: str, seed, cache: Path) -> int:
    """Rehash the files whose facts come from the cache (mode "all"), a seeded sample of them
    ("sample"), or none; return how many were checked. A sha256 that differs means the cache
    key missed a change: the cache is deleted and the run fails, naming the file."""
    import random

    from stages.lib.io import sha256_file

    index = 1  # facts_of's sha256
    cached = sorted(rel for rel, f in facts.items() if f[index])
    if mode == "none" or not cached:
        return 0
    if mode == "sample":
        count = min(len(cached), SAMPLE + len(cached) // 100)
        cached = sorted(random.Random(str(seed)).sample(cached, count))
    for rel in cached:
        try:
            digest = sha256_file(os.path.join(root, rel))
        except OSError:
            digest = None  # unreadable now: a change the key missed too
        if digest != facts[rel][index]:
            if cache:
                Path(cache).unlink(missing_ok=True)
            raise StageError(f"{rel}: its bytes changed but its size, mtime, ctime and inode did "
                             f"not, so .cache/ingest/ held a stale sha256 (ingest.verify_cache "
                             f"caught it). The cache was deleted: re-run ingest to rehash "
                             f"everything.")
    return len(cached)


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


def inventory(root: Path, workers: int = 0, limit: int = 0, cache: Path | None = None,
              task=None, verify: str = "sample", settings: dict | None = None):
    """(manifest rows sorted by path, stats) for the tree at root (task: the default unless
    given; limit: the modality's input limit (its LIMIT key: validate.max_pixels for images,
    validate.max_seconds for sounds), what its inspect decodes at most, 0 = all;
    settings: the task's read_settings, of the default params unless given).

    stats: {"files": n, "inspected": files hashed and decoded this time, "cached": reused,
    "verified": cached files rehashed to check the cache (verify: "sample", "all", "none"),
    "warnings": the annotations' own [(name, message)]}.
    """
    import time

    from stages.tasks import default_task

    task = task or default_task()
    if settings is None:
        from stages.lib.params import defaults

        settings = task.read_settings(defaults())
    fields, names = manifest_fields(task), facts_of(task.modality)
    started_ns = time.time_ns()
    with no_gc():
        listing = walk(root)  # annotation files included: a change to one changes the rows
        last = read_cache(cache, fields, names) if cache else {}
        notes = task.read_annotations(root, listing, settings)
        entries = [e for e in listing if e[0] not in notes.skip]
        keys = {rel: key for rel, kind, key in entries if kind == "file"}
        facts = reusable(last, keys, len(names))
    if facts:
        verified = verify_cached(root, facts, verify, last.get("started_ns"), cache)
    else:
        verified = 0
    if last and last["listing"] == listing and len(facts) == len(keys):
        # nothing changed (and nothing racy): the same rows
        return last["rows"], {"files": len(keys), "inspected": 0, "cached": len(keys),
                              "verified": verified, "warnings": notes.warnings}
    todo = [rel for rel in keys if rel not in facts]
    if todo:
        from tqdm import tqdm

        from stages.lib.modality import get

        get(task.modality_name)  # imported once here, inherited by forked workers

        workers = workers or os.cpu_count() or 1
        todo.sort(key=lambda rel: (-keys[rel][0], rel))  # largest first: no straggler at the end
        jobs = batches(todo, workers)
        with (ProcessPoolExecutor(workers, initializer=start_worker,
                                  initargs=(str(root), limit, task.modality_name)) as pool,
              tqdm(total=len(todo), desc="ingest", unit="file", disable=None) as bar):
            for batch, rows in zip(jobs, pool.map(inspect_batch, jobs), strict=True):
                facts.update(zip(batch, rows, strict=True))
                bar.update(len(batch))
    with no_gc():
        rows = [make_row(rel, kind, facts.get(rel), notes, fields, names, key)
                for rel, kind, key in entries]
        rows += [make_row(rel, "extra", None, notes, fields, names) for rel in notes.extra]
        rows = sorted((r for r in rows if r), key=lambda r: r["path"])
        if cache:
            write_bytes(cache, marshal.dumps({  # strings shared with the rows are stored once
                "fields": fields, "facts_fields": names, "listing": listing, "rows": rows,
                "facts": {rel: facts[rel] for rel in keys}, "started_ns": started_ns}))
    return rows, {"files": len(keys), "inspected": len(todo), "cached": len(keys) - len(todo),
                  "verified": verified, "warnings": notes.warnings}


DIRLINK = "symlinked folder: not followed; replace it with a real folder"


def make_row(rel: str, kind: str, facts, notes, fields, names, special=None) -> dict | None:
    """The manifest row of one entry (facts: the values of the facts `names` in order, or
    None), or None for an empty folder the task has nothing to say about. A decode problem
    comes first; an annotation problem (notes.errors) shows when the file itself is fine."""
    if kind == "empty" and rel not in notes.errors:
        return None
    values = notes.values.get(rel, {})
    row = dict.fromkeys(fields, "")
    row.update({k: values.get(k, "") for k in fields if k in values})
    row.update(zip(names, facts or ("",) * len(names), strict=True))
    row["path"] = rel
    if kind == "dirlink":
        row["error_kind"], row["error"] = "symlink", DIRLINK
    elif kind == "special":
        row["error_kind"], row["error"] = SPECIAL[special]
    elif not row["error"] and rel in notes.errors:
        row["error_kind"], row["error"] = notes.errors[rel]
    return row


def build_manifest(root: Path, workers: int = 0, limit: int = 0, task=None) -> list[dict]:
    """Manifest rows for root, without the cache (task: the default unless given)."""
    return inventory(Path(root), workers, limit, task=task)[0]


def check_fields(rows, task) -> None:
    """A StageError naming the file whose annotation field is over FIELD_LIMIT characters,
    which no stage could read back (the boxes are capped far below it: validate.max_boxes;
    only class names of a megabyte each could get there)."""
    from stages.lib.csvlimit import FIELD_LIMIT

    for r in rows:
        for field in task.annotation_fields:
            if isinstance(r[field], str) and len(r[field]) > FIELD_LIMIT:
                raise StageError(f"{r['path']}: its `{field}` takes {len(r[field]):,} characters "
                                 f"in the manifest, over the {FIELD_LIMIT:,} a field may hold: "
                                 f"lower validate.max_boxes or shorten the class names.")


@click.command()
@params_option
@click.option("--no-cache", is_flag=True,
              help="Hash and decode every file again instead of reusing .cache/ingest/ facts "
                   "for files whose size and mtime are unchanged (the manifest is the same).")
def main(params_path, no_cache):
    """Hash and decode every file under `data.source` and write data/manifest.csv.

    Reads `task`, `data.source`, `ingest.workers` (0 = all cores) and the modality's input
    limit (`validate.max_pixels` for images, `validate.max_seconds` for sounds: nothing larger
    is decoded) from the params file.
    """
    from stages.tasks import open_stage

    task, params, _ = open_stage("ingest", params_path)  # first: params that do not fit stop
    source = Path(params["data"].source)
    if not source.is_dir():
        raise StageError(
            f"data.source: {source} is not a folder. Point data.source in params.yaml at your "
            f"dataset (for classification an ImageFolder tree <source>/<class>/<image>)."
        )
    settings = task.read_settings(params)  # detection: validate.max_boxes caps boxes as read
    limit = getattr(params["validate"], task.modality.LIMIT.partition(".")[2])
    max_boxes = params["validate"].max_boxes
    cache = None if no_cache else cache_file(source, limit, task, max_boxes)
    ingest = params["ingest"]
    rows, stats = inventory(source, ingest.workers, limit, cache, task, ingest.verify_cache,
                            settings)
    if not rows:
        raise StageError(f"data.source: {source} holds no files; add your images there.")
    check_fields(rows, task)
    before = changes.previous("ingest", "outs")  # the last run's manifest, by dvc.lock's md5
    write_csv(MANIFEST, rows, manifest_fields(task))
    for line in changes.report("ingest", before, read_csv(MANIFEST)):
        click.echo(show.text(line))
    dataset = changes.dataset_version(source)
    if dataset:  # a registered dataset: `dvc import ... --rev NAME@v2.0.0` (source.dvc)
        click.echo(show.text(f"ingest: {source} is {dataset['rev'] or dataset['commit'][:8]} "
                             f"of {dataset['url']} ({source}.dvc)"))
    bad = sum(1 for r in rows if r["error"])
    for name, message in stats["warnings"]:
        click.echo(show.text(f"ingest: warning: {name}: {message}"), err=True)
    special = [r["path"] for r in rows if r["error_kind"] == "not_regular"]
    if special:
        shown = ", ".join(special[:5]) + (" ..." if len(special) > 5 else "")
        click.echo(f"ingest: warning: {len(special)} FIFO(s), socket(s) or device(s) under "
                   f"{source}/: {shown}. They are rows with error_kind not_regular, never "
                   f"opened, but `dvc repro` blocks hashing a FIFO: remove them or list them "
                   f"in .dvcignore (python -m tools.doctor names them).", err=True)
    click.echo(f"ingest: {len(rows)} files from {source}/ -> {MANIFEST} ({bad} with errors; "
               f"{stats['inspected']} hashed, {stats['cached']} unchanged from the cache, "
               f"{stats['verified']} of them rehashed to check it)")


if __name__ == "__main__":
    main()
