"""Atomic, deterministic writers and the one error type stages raise.

Every file a stage writes goes to a temp file in the same folder and is renamed into place,
so an interrupted stage never leaves a half-written output behind.
"""
import csv
import errno
import io
import json
import os
import tempfile
from pathlib import Path

import click


_UMASK = os.umask(0)
os.umask(_UMASK)


class StageError(click.ClickException):
    """A problem the user can fix; click prints it as `Error: ...` and exits with code 1."""


FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def write_failed(path, exc: OSError) -> StageError | OSError:
    """The one-line StageError for a write that failed on a full disk (or a file-size limit)
    or an unwritable folder, naming the path, the cause and the fix; other errors as they are.
    Nothing half-written is left: every out is written to a temp file and renamed."""
    path = Path(path)
    if exc.errno in FULL:
        return StageError(f"{path}: cannot write it: {exc.strerror} (the disk, a quota or a "
                          f"file-size limit is full). Free space on {path.parent} and re-run; "
                          f"the outs already there are complete (writes are atomic).")
    if exc.errno in UNWRITABLE:
        return StageError(f"{path}: cannot write it: {exc.strerror}. Make {path.parent} "
                          f"writable and re-run.")
    return exc


def write_bytes(path, data) -> None:
    """Write data to path atomically (temp file, fsync, rename); a full disk or an unwritable
    folder is a StageError naming the path (write_failed). data: bytes, or a list of bytes-like
    parts written one after the other (a header and an array's own memory: no joined copy)."""
    try:
        _write_bytes(Path(path), data)
    except OSError as exc:
        raise write_failed(path, exc) from None


def _write_bytes(path: Path, data: bytes, sync: bool = True) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for part in (data if isinstance(data, list) else [data]):
                f.write(part)  # a buffered file writes all of it, or raises
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; outs get the usual permissions
        if sync:
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def write_pending(path, data) -> str:
    """write_bytes but for the fsync and the rename: the temp file's path, for commit() to
    finish (in another process, maybe: prepare's workers write, its parent waits on the disk)."""
    try:
        return _write_bytes(Path(path), data, sync=False)
    except OSError as exc:
        raise write_failed(path, exc) from None


def commit(tmp, path) -> None:
    """Finish a write_pending: fsync the temp file, rename it to path (errors as write_bytes's;
    the temp file is removed)."""
    try:
        with open(tmp, "r+b") as f:  # writable: some systems refuse to fsync a read-only file
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise write_failed(path, exc) from None


def json_bytes(obj) -> bytes:
    """Indented JSON with sorted keys and a final newline: the one JSON format of every out."""
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def csv_bytes(rows, fieldnames) -> bytes:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fieldnames, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue().encode()


def write_json(path, obj) -> None:
    write_bytes(path, json_bytes(obj))


def write_csv(path, rows, fieldnames) -> None:
    write_bytes(path, csv_bytes(rows, fieldnames))


def read_csv(path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        raise StageError(f"{path} not found: run the stage that writes it first (`dvc repro`).")
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def read_json(path):
    path = Path(path)
    if not path.exists():
        raise StageError(f"{path} not found: run the stage that writes it first (`dvc repro`).")
    return json.loads(path.read_text())
