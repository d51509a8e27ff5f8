"""predict's inputs: SOURCE arguments (files, folders, globs, @lists) as the paths to predict.

Folders are walked with stages.lib.safefs.walk (sorted; hidden entries skipped; symlinked
folders after the real tree, each real folder once). What cannot be read without harm (a
FIFO, socket or device, a symlink loop, a folder that cannot be listed or is reached twice)
becomes a Problem: a path whose row carries its error, never opened. check_sources fails a
SOURCE that names nothing before anything is loaded.
"""
import glob
import os
import stat

import click

from stages.lib import safefs


class Problem(str):
    """An input path that gets an error row without being opened: an unreadable folder, a
    symlink loop, a folder reached twice, a FIFO, socket or device. Equal to its path."""

    def __new__(cls, path: str, error: str):
        obj = super().__new__(cls, path)
        obj.error = error
        return obj


def _special(mode: int) -> str:
    return f"not_regular: {safefs.mode_text(mode)}, not read"


def _unlistable(exc: OSError) -> str:
    return f"unreadable: cannot list this folder: {exc.strerror}"


def _scan(path: str):
    """(sorted non-hidden entries, None) or (None, error message) for one folder."""
    try:
        with os.scandir(path) as it:
            return sorted((e for e in it if not e.name.startswith(".")),
                          key=lambda e: e.name), None
    except OSError as exc:
        return None, _unlistable(exc)


def walk(top: str):
    """Files under top, recursively, in sorted order (a folder's files, then its subfolders);
    hidden files and folders are skipped. Symlinked folders are followed after the real tree,
    each real folder once (by st_dev and st_ino): a symlink to a folder already listed (a loop
    back to an ancestor, or a second way into one) gets one Problem row, as do a folder that
    cannot be listed, a symlink cycle and a FIFO, socket or device (never opened)."""
    for e in safefs.walk(os.path.normpath(top), sort=True, follow=True):
        if e.kind in ("file", "broken", "vanished"):  # the last two: their rows say why
            yield e.path
        elif e.kind == "special":
            yield Problem(e.path, _special(e.st.st_mode))
        elif e.kind == "loop":
            yield Problem(e.path, "symlink_loop: a symlink cycle, it points back to itself")
        elif e.kind == "unlistable":
            yield Problem(e.path, _unlistable(e.error))
        elif e.kind == "seen":
            first = e.error
            how = "back to its own parent folder" if (e.path + os.sep).startswith(
                first + os.sep) else "to a folder"
            yield Problem(e.path, f"symlink_loop: a symlinked folder pointing {how} {first}, "
                                  f"whose files are listed once, there")


def _glob(pattern: str):
    """glob.glob(pattern, recursive=True), except that `**` descends each real folder once
    (by st_dev and st_ino; symlinked folders after the real tree): loops are not followed,
    and a folder the pattern must list but cannot (no permission, an I/O error) is a Problem
    (`unreadable`), as walk() gives it, instead of silently matching nothing."""
    import fnmatch

    drive, rest = os.path.splitdrive(pattern)
    parts = [p for p in rest.split(os.sep) if p]
    start = drive + (os.sep if rest.startswith(os.sep) else "")
    found, seen, links = set(), set(), []

    def listing(folder):
        entries, error = _scan(folder or ".")
        if error and os.path.isdir(folder or "."):  # a path that is no folder: no match
            found.add(Problem(os.path.normpath(folder or "."), error))
        return entries or []

    def match(folder, parts):
        if not parts:
            if folder and os.path.lexists(folder):
                found.add(os.path.normpath(folder))
            return
        head, tail = parts[0], parts[1:]
        if head == "**":
            seen.add(safefs.folder_id(folder or "."))
            match(folder, tail)
            for e in listing(folder):
                path = os.path.join(folder, e.name)
                try:
                    if not e.is_dir():
                        continue
                    if e.is_symlink():
                        links.append((path, parts))
                        continue
                except OSError:
                    continue
                seen.add(safefs.folder_id(path))
                match(path, parts)
        elif glob.has_magic(head):
            for e in listing(folder):
                if fnmatch.fnmatchcase(e.name, head):
                    match(os.path.join(folder, e.name), tail)
        else:
            match(os.path.join(folder, head) if folder else head, tail)

    match(start, parts)
    while links:
        path, parts = links.pop(0)
        ident = safefs.folder_id(path)
        if ident not in seen:
            seen.add(ident)
            match(path, parts)
    return sorted(found)


def expand(source: str, allow_glob: bool = True):
    """A file, a folder (recursive) or a glob pattern (sorted matches), as file paths.

    A path that does not exist is yielded as is: its row will carry the error.
    """
    if os.path.isdir(source):
        yield from walk(source)
    elif allow_glob and glob.has_magic(source) and not os.path.exists(source):
        for match in _glob(source):
            if isinstance(match, Problem):
                yield match
            else:
                yield from walk(match) if os.path.isdir(match) else [os.path.normpath(match)]
    else:
        yield os.path.normpath(source)


def list_entries(list_file: str):
    """The entries of a @list file: one per line (files or folders, no globs); blank lines and
    lines starting with # are skipped; relative paths are relative to the working directory."""
    with open(list_file, encoding="utf-8") as f:
        for line in f:
            entry = line.rstrip("\r\n").strip()
            if entry and not entry.startswith("#"):
                yield entry


def read_list(list_file: str):
    """Paths from a @list file (list_entries, each expanded)."""
    for entry in list_entries(list_file):
        yield from expand(entry, allow_glob=False)


def linked_folders(top: str) -> list[str]:
    """The folders under top that walk() reaches through a symlink (each real folder once):
    their files are inputs too, though they lie elsewhere."""
    return sorted(e.path for e in safefs.walk(os.path.normpath(top), sort=True, follow=True)
                  if e.kind == "linked")


def input_folders(sources):
    """The folders whose files are inputs (--out-dir writes nothing inside them), as (folder,
    None) for a folder SOURCE, a folder in an @list or a folder a glob matches, and the
    folders each reaches through symlinks; and as (folder, file) for the folder of a file
    SOURCE, of a file in an @list and of a file a glob matches (each folder once): masks
    written there would be inputs of the next predict over that folder."""
    parents = set()
    for source in sources:
        if source.startswith("@"):
            entries = list(list_entries(source[1:]))
        elif os.path.isdir(source):
            entries = [source]
        elif glob.has_magic(source) and not os.path.exists(source):
            entries = [m for m in _glob(source) if not isinstance(m, Problem)]
        else:
            entries = [source]
        for entry in entries:
            if os.path.isdir(entry):
                yield entry, None
                for linked in linked_folders(entry):
                    yield linked, None
                continue
            parent = os.path.dirname(os.path.normpath(entry)) or "."
            if parent not in parents:
                parents.add(parent)
                yield parent, os.path.normpath(entry)


def iter_inputs(sources):
    """Every input path of the SOURCE arguments, in order (Problems included)."""
    for source in sources:
        if source.startswith("@"):
            yield from read_list(source[1:])
        else:
            yield from expand(source)


def check_sources(sources) -> None:
    """Fail before loading anything when a SOURCE itself names nothing (a typo)."""
    for source in sources:
        if source.startswith("@"):
            try:
                mode = os.stat(source[1:]).st_mode
            except OSError:
                raise click.UsageError(f"list file {source[1:]} not found (SOURCE "
                                       f"{source}).") from None
            if not stat.S_ISREG(mode):  # never opened: a FIFO would hang predict
                raise click.UsageError(f"list file {source[1:]} is not a regular file "
                                       f"({safefs.mode_text(mode)}, not read; SOURCE "
                                       f"{source}): give a text file with one path per line.")
        elif not os.path.exists(source) and not (glob.has_magic(source) and _glob(source)):
            raise click.UsageError(f"SOURCE {source} is neither a file, a folder nor a glob "
                                   f"that matches a file.")


