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
import threading
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


def write_bytes(path, data, direct: bool = False) -> None:
    """Write data to path atomically (temp file, fsync, rename); a full disk or an unwritable
    folder is a StageError naming the path (write_failed). data: bytes, or a list of bytes-like
    parts written one after the other (a header and an array's own memory: no joined copy).
    direct: past the page cache where the filesystem allows it (_write_direct)."""
    try:
        _write_bytes(Path(path), data, direct=direct)
    except OSError as exc:
        raise write_failed(path, exc) from None


def _write_bytes(path: Path, data: bytes, sync: bool = True, direct: bool = False) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        parts = data if isinstance(data, list) else [data]
        done = direct and _write_direct(fd, parts)
        with os.fdopen(fd, "wb") as f:
            if not done:
                for part in parts:
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


# Direct writes (O_DIRECT): the disk takes the bytes straight from our memory. A buffered write
# first copies them into the page cache (fresh pages, allocated and accounted), then the kernel
# writes them back: on this project's ext4 disks that costs 3.6 CPU s per GB, a fifth of
# decoding the images (bench/write_cost.py), against about 0.2 s per GB direct.
DIRECT_MIN = 1 << 20  # smaller files: nothing worth saving
_ALIGN = 4096  # a multiple of every disk's logical block: O_DIRECT's offsets, sizes and memory
_CHUNK = 8 << 20
_staging: dict = {}  # pid -> this process's page-aligned buffer (a forked child makes its own)
_staging_lock = threading.Lock()


def direct_wanted() -> bool:
    """Whether large shard writes try O_DIRECT: where the system has it, unless
    PIPELINE_DIRECT_IO=0 (a filesystem where it is slow; the bytes written are the same)."""
    return hasattr(os, "O_DIRECT") and os.environ.get("PIPELINE_DIRECT_IO", "1") != "0"


def _write_direct(fd: int, parts) -> bool:
    """Write parts to the new, empty file fd with O_DIRECT, through one reused, page-aligned
    8 MiB buffer (O_DIRECT needs aligned memory, offsets and sizes: the last block is padded,
    then cut off by ftruncate). True when written; False, with fd still empty and buffered,
    when the filesystem refuses O_DIRECT (tmpfs, some network and overlay filesystems) or
    writes short (a file-size limit): the buffered write then does it, or names the error."""
    if sum(memoryview(part).nbytes for part in parts) < DIRECT_MIN or not direct_wanted():
        return False
    import fcntl
    import mmap

    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
    except OSError:
        return False
    with _staging_lock:
        if os.getpid() not in _staging:  # MAP_PRIVATE: a forked child's writes are its own
            _staging[os.getpid()] = mmap.mmap(-1, _CHUNK, flags=mmap.MAP_PRIVATE)
        buf = memoryview(_staging[os.getpid()])
        try:
            fill = size = 0
            for part in parts:
                part = memoryview(part).cast("B")
                while len(part):
                    n = min(len(part), _CHUNK - fill)
                    buf[fill:fill + n] = part[:n]
                    fill, part = fill + n, part[n:]
                    if fill == _CHUNK:
                        _write_block(fd, buf)
                        size, fill = size + fill, 0
            if fill:
                _write_block(fd, buf[:-(-fill // _ALIGN) * _ALIGN])
                size += fill
            os.ftruncate(fd, size)
            return True
        except OSError as exc:
            if exc.errno != errno.EINVAL and not isinstance(exc, _ShortWrite):
                raise
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            return False
        finally:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)


class _ShortWrite(OSError):
    pass


def _write_block(fd: int, block) -> None:
    if os.write(fd, block) != len(block):
        raise _ShortWrite("short O_DIRECT write")


def write_pending(path, data, direct: bool = False) -> str:
    """write_bytes but for the fsync and the rename: the temp file's path, for commit() to
    finish (in another process, maybe: prepare's workers write, its parent waits on the disk).
    direct: write it past the page cache where the filesystem allows it (_write_direct)."""
    try:
        return _write_bytes(Path(path), data, sync=False, direct=direct)
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
