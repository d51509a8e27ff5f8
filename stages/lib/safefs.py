"""Reading a user's folders safely: the one tree walker, the one non-blocking open and the one
name for a file's mode.

- walk(): every entry under a folder, each classified by lstat (then its target's stat for a
  symlink) on the folder's own descriptor, never by opening it: a FIFO, socket or device is
  named, never read; a symlink loop, a broken symlink and a folder that cannot be listed are
  entries too, never an exception. ingest, tools.source_check and predict's inputs all walk
  with it.
- open_regular(): a file opened without blocking and checked with fstat before a byte is read
  (a blocking open of a FIFO waits for a writer forever); NotRegular otherwise.
- mode_kind() and mode_text(): what a stat mode is ("fifo", "socket", ...) and how a message
  says it ("a FIFO (named pipe)", ...).
"""
import errno
import os
import stat
from typing import NamedTuple

MODE_TEXT = {"fifo": "a FIFO (named pipe)", "socket": "a socket", "device": "a device",
             "folder": "a folder"}  # anything else: "not a regular file"


def mode_kind(mode: int) -> str:
    """What a stat mode is: "file" (regular), "folder", "fifo", "socket", "device" (character
    or block) or "other"."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "other"


def mode_text(mode: int) -> str:
    """What a stat mode that is no regular file is, for a message: "a FIFO (named pipe)", "a
    socket", "a device", "a folder" or "not a regular file"."""
    return MODE_TEXT.get(mode_kind(mode), "not a regular file")


class NotRegular(ValueError):
    """open_regular's refusal: path is a FIFO, socket, device or folder (`mode`); never read."""

    def __init__(self, path, mode: int):
        super().__init__(f"{path}: {mode_text(mode)}, not a regular file")
        self.mode = mode


def open_regular(path):
    """A buffered binary file on path, which must be a regular file: opened non-blocking and
    checked with fstat before a byte is read (NotRegular otherwise, the descriptor closed),
    then made blocking. An OSError of the open itself (missing, no permission, a symlink
    loop, ENXIO for a socket) is raised as it is."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegular(path, mode)
    os.set_blocking(fd, True)
    return open(fd, "rb")


class Entry(NamedTuple):
    """One thing walk() met. path: top joined with the entry's names; rel: its path relative
    to top, with "/" ("" for top itself); kind: see walk(); st: its stat (a symlink's target's,
    lstat's for a broken symlink), or None; error: the OSError of an "unlistable" folder, or
    for a "seen" symlinked folder the path its folder was first listed under."""

    path: str
    rel: str
    kind: str
    st: os.stat_result | None = None
    error: OSError | str | None = None


def classify(entry: os.DirEntry) -> tuple[str, os.stat_result | None]:
    """(kind, stat) of a listed entry by lstat, then its target's stat for a symlink: "folder",
    "dirlink" (a symlink to a folder), "file" (a regular file or a symlink to one), "special"
    (a FIFO, socket or device, or a symlink to one), "loop" (a symlink cycle), "broken" (a
    symlink whose target cannot be stat'ed; its lstat) or "vanished" (gone since listing)."""
    try:
        lst = entry.stat(follow_symlinks=False)
    except OSError:
        return "vanished", None
    if stat.S_ISDIR(lst.st_mode):
        return "folder", lst
    st = lst
    if stat.S_ISLNK(lst.st_mode):
        try:
            st = entry.stat()  # the target
        except OSError as exc:
            return ("loop" if exc.errno == errno.ELOOP else "broken"), lst
        if stat.S_ISDIR(st.st_mode):
            return "dirlink", st
    return ("file" if stat.S_ISREG(st.st_mode) else "special"), st


def _listing(folder: str, hidden: bool, sort: bool) -> list[tuple[str, str, os.stat_result]]:
    """(name, kind, stat) of a folder's entries (classify), stat'ed by name in the folder's
    descriptor (fewer lookups than by path); OSError when it cannot be listed."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with os.scandir(fd) as it:
            entries = [e for e in it if hidden or not e.name.startswith(".")]
        if sort:
            entries.sort(key=lambda e: e.name)
        return [(e.name, *classify(e)) for e in entries]
    finally:
        os.close(fd)


def _tree(top: str, rel: str, hidden: bool, sort: bool):
    """walk() of one real tree (symlinked folders yielded, never entered)."""
    stack = [(top, rel)]
    while stack:
        folder, rel = stack.pop()
        yield Entry(folder, rel, "folder")
        try:
            listed = _listing(folder, hidden, sort)
        except OSError as exc:
            yield Entry(folder, rel, "unlistable", error=exc)
            continue
        if not listed:
            yield Entry(folder, rel, "empty")
        folders = []
        for name, kind, st in listed:
            path = name if folder == os.curdir else os.path.join(folder, name)
            sub = f"{rel}/{name}" if rel else name
            if kind == "folder":
                folders.append((path, sub))
            else:
                yield Entry(path, sub, kind, st)
        stack.extend(reversed(folders) if sort else folders)


def folder_id(path):
    """(st_dev, st_ino) of a folder (through symlinks), or None when it is not one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def walk(top, *, hidden: bool = False, sort: bool = False, follow: bool = False):
    """Every entry under top, depth first, as Entry: each folder ("folder", top first) as it
    is entered, then "unlistable" (it cannot be listed: error) or "empty" (no entries), or its
    entries other than subfolders (classify's kinds), then its subfolders the same way.

    hidden: include entries whose name starts with "."; sort: a folder's entries in name
    order and its subfolders in that order (else the listing's order, the last-listed
    subfolder first). follow: after the real tree, enter each symlinked folder ("dirlink", in
    the order met) whose folder was not listed yet (by st_dev and st_ino; a folder entered
    is "linked" before its own "folder"); one already listed is "seen" (error: where)."""
    top = os.fspath(top)
    if not follow:
        yield from _tree(top, "", hidden, sort)
        return
    seen, links = {folder_id(top): top}, []  # (st_dev, st_ino) -> the path it was listed under
    trees = [(top, "")]
    while trees:
        for entry in _tree(*trees.pop(), hidden, sort):
            if entry.kind == "folder":
                seen[folder_id(entry.path)] = entry.path
            elif entry.kind == "dirlink":
                links.append(entry)
            yield entry
        while links and not trees:
            link = links.pop(0)
            ident = folder_id(link.path)
            if ident in seen:
                yield link._replace(kind="seen", error=seen[ident])
                continue
            seen[ident] = link.path
            yield link._replace(kind="linked")
            trees.append((link.path, link.rel))
