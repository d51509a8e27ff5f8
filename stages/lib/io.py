"""Atomic, deterministic writers and the one error type stages raise.

Every file a stage writes goes to a temp file in the same folder and is renamed into place,
so an interrupted stage never leaves a half-written output behind.
"""
import contextlib
import csv
import errno
import io
import json
import os
import stat
import tempfile
import threading
from pathlib import Path

import click

from stages.lib.csvlimit import FIELD_LIMIT  # noqa: F401 - importing it raises csv's limit


_UMASK = os.umask(0)
os.umask(_UMASK)


class StageError(click.ClickException):
    """A problem the user can fix; click prints it as `Error: ...` and exits with code 1. A
    path or name from the user's data in it is printed escaped (stages.lib.show.text): no
    terminal escape or bidi override in a file name reaches the terminal."""

    def format_message(self) -> str:
        from stages.lib.show import text

        return text(self.message, keep="\n\t")


FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)
CAUSE = {errno.ENOSPC: "the disk is full", errno.EFBIG: "a file-size limit (ulimit -f)",
         errno.EDQUOT: "a disk quota is full"}


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


@contextlib.contextmanager
def scratch_dir(what: str):
    """A temporary folder (under TMPDIR) for a library that only writes to files (the ONNX
    exporter, OpenVINO's converter, onnxruntime's quantizer), removed afterwards. A full disk or
    a file-size limit while it is in use is a one-line StageError naming the folder and the fix
    (free space, or point TMPDIR at a larger disk) instead of a raw OSError; what: the stage
    and the step, for the message. Nothing of it stays: the folder is removed either way."""
    try:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                yield Path(tmp)
            except OSError as exc:
                if exc.errno not in FULL + UNWRITABLE:
                    raise
                where = Path(exc.filename) if exc.filename else Path(tmp)
                raise StageError(
                    f"{what}: cannot write to {where}: {exc.strerror} (errno {exc.errno}, "
                    f"{CAUSE.get(exc.errno, 'not writable')}). Free space on "
                    f"{Path(tmp).parent} or point TMPDIR at a larger disk (TMPDIR=/big/tmp "
                    f"dvc repro), and re-run; the temporary files were removed and no out "
                    f"was written.") from None
    except OSError as exc:  # making the folder itself failed
        if exc.errno not in FULL + UNWRITABLE:
            raise
        raise StageError(f"{what}: cannot make a temporary folder in {tempfile.gettempdir()}: "
                         f"{exc.strerror} (errno {exc.errno}). Free space there or point "
                         f"TMPDIR at a larger, writable disk, and re-run.") from None


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


@contextlib.contextmanager
def replace_file(path):
    """A binary file that replaces the file at path atomically when the block ends without an
    error: a temp file next to the file it replaces, fsynced, renamed over it. For a file a
    user names (predict's --out): through a symlink, the link's target is replaced and the link
    stays a link; the target's permission bits are kept (a new file gets 0666 minus the umask,
    not mkstemp's 0600). An error inside removes the temp file and leaves path as it was.
    (A stage's outs use write_bytes, which replaces the link itself: DVC may link outs into
    its cache, which must never be written through.)"""
    target = Path(os.path.realpath(path))
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_UMASK
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    import mmap

    if not _set_direct(fd, True):
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
                        _write_block(fd, buf, size)
                        size, fill = size + fill, 0
            if fill:
                _write_block(fd, buf[:_padded(fill)], size)
                size += fill
            os.ftruncate(fd, size)
            return True
        except OSError as exc:
            if exc.errno != errno.EINVAL and not isinstance(exc, _ShortWrite):
                raise
            os.ftruncate(fd, 0)  # (pwrite left the file position at 0)
            return False
        finally:
            _set_direct(fd, False)


class _ShortWrite(OSError):
    pass


def _write_block(fd: int, block, offset: int) -> None:
    if os.pwrite(fd, block, offset) != len(block):
        raise _ShortWrite("short O_DIRECT write")


class StreamedWrite:
    """One new file written from a page-aligned buffer while the caller is still filling it:
    advance(done) says bytes [0, done) of buf are final, and every whole 8 MiB block of them
    goes to the disk with O_DIRECT straight from buf (no staging copy), from a writer thread,
    while the caller goes on (prepare's workers decode the rest of the shard meanwhile, instead
    of waiting on the disk at the end). finish() writes the rest and returns the temp file's
    path, as write_pending does, for commit() to fsync and rename.

    buf: memory that starts on a page boundary (an mmap) with room up to size rounded up to
    4 KiB (the last block is written padded, then cut off by ftruncate). Where O_DIRECT is not
    used (a file under 1 MiB, PIPELINE_DIRECT_IO=0, a filesystem that refuses it, a short
    write), finish() writes buf[:size] buffered: the same bytes, and write_bytes' one-line
    errors. As a context manager, an exception inside (a failed decode) waits for the writer
    thread and removes the temp file."""

    def __init__(self, path, buf, size: int):
        self.path, self.size = Path(path), size
        self.buf = memoryview(buf).cast("B")
        self.sent, self.pending, self.pool = 0, [], None
        if len(self.buf) < size:
            raise ValueError(f"{path}: a buffer of {len(self.buf)} bytes for {size}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd, self.tmp = tempfile.mkstemp(dir=self.path.parent,
                                                 prefix=f".{self.path.name}.", suffix=".tmp")
        except OSError as exc:
            raise write_failed(self.path, exc) from None
        self.direct = (size >= DIRECT_MIN and direct_wanted() and _page_aligned(self.buf)
                       and len(self.buf) >= _padded(size) and _set_direct(self.fd, True))

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if kind is not None:  # the caller's error is the one to report, not a write's
            try:
                self._drain()
            except OSError:
                pass
            finally:
                self._close()
                Path(self.tmp).unlink(missing_ok=True)

    def advance(self, done: int) -> None:
        """Bytes [0, done) of buf are final: hand every whole block of them to the writer."""
        while self.direct and done - self.sent >= _CHUNK:
            self._send(_CHUNK)

    def finish(self) -> str:
        """Write what is left, wait for the writer; the temp file's path (see write_pending)."""
        try:
            if self.direct:
                if self.size > self.sent:
                    self._send(_padded(self.size) - self.sent)
                if not self._drain():  # refused or short: the buffered write does it all
                    self.direct = False
                    _set_direct(self.fd, False)
                    os.ftruncate(self.fd, 0)
            if self.direct:
                os.ftruncate(self.fd, self.size)
            else:
                with os.fdopen(self.fd, "wb", closefd=False) as f:
                    f.write(self.buf[:self.size])  # all of it, or raises
            os.chmod(self.tmp, 0o666 & ~_UMASK)
            self._close()
        except BaseException as exc:
            self._drain()
            self._close()
            Path(self.tmp).unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise write_failed(self.path, exc) from None
            raise
        return self.tmp

    def _send(self, n: int) -> None:
        if self.pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(1, thread_name_prefix="direct-write")
        off, self.sent = self.sent, self.sent + n
        self.pending.append(self.pool.submit(_write_block, self.fd, self.buf[off:off + n], off))

    def _drain(self) -> bool:
        """Wait for every block sent: True when all were written whole; False when O_DIRECT
        was refused or wrote short (other errors raise)."""
        whole = True
        for future in self.pending:
            exc = future.exception()
            if exc is not None:
                if exc.errno != errno.EINVAL and not isinstance(exc, _ShortWrite):
                    self.pending = []
                    raise exc
                whole = False
        self.pending = []
        return whole

    def _close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _padded(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


def _page_aligned(buf) -> bool:
    import numpy as np

    return np.frombuffer(buf, np.uint8).ctypes.data % _ALIGN == 0


def _set_direct(fd: int, on: bool) -> bool:
    """Turn O_DIRECT on or off for fd: False where the filesystem refuses it."""
    import fcntl

    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT if on else flags & ~os.O_DIRECT)
    except OSError:
        return False
    return True


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
    """A CSV table (header, then rows; "\n" ends a row). A field is quoted when it holds a
    comma, a quote, "\n" or "\r" (the csv module alone leaves a bare "\r" unquoted, which
    splits the row on reading back: such a row is written with every field quoted). Values are
    written exactly: a leading `=`, `+`, `-` or `@` stays (see docs/data-gate.md)."""
    rows = rows if isinstance(rows, list) else list(rows)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fieldnames, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    text = buf.getvalue()
    if "\r" not in text:  # the usual case: no "\r" anywhere, so none unquoted
        return text.encode()
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fieldnames, lineterminator="\n")
    writer.writeheader()
    quoted = csv.DictWriter(buf, fieldnames=fieldnames, lineterminator="\n",
                            quoting=csv.QUOTE_ALL)
    for row in rows:
        if any("\r" in v for v in row.values() if isinstance(v, str)):
            quoted.writerow(row)
        else:
            writer.writerow(row)
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


def write_folder(folder, files: dict) -> None:
    """folder holding exactly `files` ({name: bytes}), replaced whole: it appears at once, and
    no file of an earlier run stays beside them."""
    import shutil

    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, data in sorted(files.items()):
        write_bytes(tmp / name, data)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


HASH_CHUNK = 1 << 20  # sha256_file's read size (ingest hashes a file of at most one at once)


def sha256_file(path, missing=None) -> str:
    """sha256 (hex) of a file, hashed in 1 MiB chunks so a large file is never read into memory
    at once. missing: what a path that is not a file gives (provenance's ""); None: that
    raises, as opening it does."""
    import hashlib

    if missing is not None and not Path(path).is_file():
        return missing
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
