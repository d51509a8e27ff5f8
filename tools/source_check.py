"""The entries under a data source that DVC's own walk trips on, found before DVC walks it.

DVC hashes every file of a stage's dependency (hidden ones too, all but .dvcignore'd paths)
before the stage runs, so `dvc repro` fails before ingest can name the bad file:
- a FIFO blocks it forever; a socket or a device cannot be hashed;
- a symlink loop stops it with `[Errno 40] Too many levels of symbolic links`;
- a symlink to nothing stops it with `[Errno 2] No such file or directory`;
- a folder it cannot list (as a user without read permission) stops it with `Permission
  denied: .../.gitignore`, and a file it cannot read with `Permission denied`;
- a file or folder name that is not UTF-8 stops it with a codec error that names no file.

ingest names all of these as rows too, but only once DVC lets it run. This walk
(stages.lib.safefs.walk) never opens a FIFO, socket or device (each entry is classified by
lstat first) and never follows a symlinked folder (nor does DVC). Used by `tools.doctor` and
`tools.init --source`.
"""
import errno

from stages.lib import safefs

# kind: (what it is, what DVC does with it, the fix)
KINDS = {
    "special": ("FIFO(s), socket(s) or device(s)", "`dvc repro` would block forever hashing "
                "them", "remove them, or list each in .dvcignore (one path per line; ingest "
                "still reports them)"),
    "loop": ("symlink loop(s)", "`dvc repro` stops before ingest with [Errno 40] Too many "
             "levels of symbolic links", "remove each link or point it at a real file, or "
             "list it in .dvcignore"),
    "dangling": ("symlink(s) to nothing", "`dvc repro` stops before ingest with [Errno 2] No "
                 "such file or directory", "remove each link or point it at a real file, or "
                 "list it in .dvcignore"),
    "unlistable": ("folder(s) you cannot list", "`dvc repro` stops before ingest with "
                   "Permission denied", "make each readable (chmod -R u+rX PATH) or move it "
                   "out of data.source"),
    "undecodable": ("file or folder name(s) that are not UTF-8 (shown with each such byte as "
                    "\\xNN)", "`dvc repro` stops before ingest with DVC's codec error, which "
                    "names no file, and ingest refuses them", "rename each to UTF-8 (mv OLD "
                    "NEW, or convmv -f latin1 -t utf8 -r --notest FOLDER)"),
    "unreadable": ("file(s) you cannot read", "`dvc repro` stops before ingest with "
                   "Permission denied", "make each readable (chmod u+r PATH) or move it out "
                   "of data.source"),
}


def blocking_entries(source) -> list[tuple[str, str]]:
    """(path relative to source, kind) of every entry DVC's walk of source trips on, kind a
    key of KINDS, sorted by path; the source folder itself is "." when it cannot be listed."""
    from stages.lib.show import undecodable

    found = []
    for entry in safefs.walk(source, hidden=True):  # DVC hashes hidden files too
        if entry.rel and entry.kind != "unlistable" and undecodable(entry.rel):
            # named once, at its first component that is not UTF-8 (a folder's, not each file)
            parts = entry.rel.split("/")
            if undecodable(parts[-1]) and not any(undecodable(p) for p in parts[:-1]):
                found.append((entry.rel, "undecodable"))
            if entry.kind in ("folder", "empty") or undecodable(parts[-1]):
                continue
        if entry.kind == "unlistable":
            if entry.error.errno not in (errno.EACCES, errno.EPERM, errno.EIO):
                raise entry.error
            found.append((entry.rel or ".", "unlistable"))
            continue
        kind = entry_kind(entry)
        if kind:
            found.append((entry.rel, kind))
    return sorted(found)


def entry_kind(entry: safefs.Entry) -> str | None:
    """A KINDS key for an entry of safefs.walk, or None for one DVC hashes fine (or does not
    follow: a symlinked folder) and for the walk's own folder entries."""
    if entry.kind in ("loop", "special"):
        return entry.kind
    if entry.kind == "broken":
        return "dangling"
    if entry.kind != "file":
        return None
    try:  # a regular file: opened (never read) to know whether DVC can read it
        safefs.open_regular(entry.path).close()
    except OSError as exc:
        return "unreadable" if exc.errno in (errno.EACCES, errno.EPERM) else None
    except safefs.NotRegular:  # swapped for a FIFO since the listing: never read
        return None
    return None


def ignored(rel_to_root: str, patterns: set[str]) -> bool:
    """Whether .dvcignore lists this path or a folder above it (exact paths, as doctor's fix
    writes them, with or without a leading or trailing /)."""
    parts = rel_to_root.split("/")
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        if {prefix, "/" + prefix, prefix + "/", "/" + prefix + "/"} & patterns:
            return True
    return False
