"""Where `predict --out-dir` puts a prediction file, and what it must never write into or over.

Inputs keep their relative structure under the out dir (in/x/a.png -> OUT/in/x/a.png...), so
two inputs of the same name in different folders never share a file. Whether two paths are
the same folder is decided by (st_dev, st_ino) of what exists, never by comparing names, so
an overlap through `.`, `..`, a symlink or a case-folding filesystem (A.png and a.png are one
file there) is seen as what it is.
"""
import os
import stat
from pathlib import Path, PurePath


def placed(path) -> PurePath:
    """An input path as a relative path under the out dir: a relative path as it is; an
    absolute one, or one that climbs with `..`, as its absolute path without the root (so
    /data/in/x/a.png -> data/in/x/a.png, never just a.png)."""
    rel = PurePath(os.path.normpath(path))
    if rel.is_absolute() or ".." in rel.parts:
        absolute = PurePath(os.path.abspath(path))
        rel = absolute.relative_to(absolute.anchor)
    return rel


def identity(path):
    """(st_dev, st_ino) of what path names (symlinks followed), or None when nothing is
    there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def real_folders(path) -> list:
    """The identities of the folders that path is (or would be) inside, itself included:
    its deepest existing ancestor, resolved, and every parent of that."""
    path = Path(os.path.abspath(path))
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    real = Path(os.path.realpath(path))
    return [i for i in map(identity, [real, *real.parents]) if i is not None]


class OutDir:
    """predict's --out-dir: `root`, and the input folders (the folders given as SOURCE, in an
    @list or matched by a glob, and the folders of the input files) that nothing may be
    written into: a prediction file there would be an input of the next predict over that
    folder. Refuses (ValueError, one line) an out dir that is, or would put an input folder's
    predictions, inside an input folder."""

    def __init__(self, root, input_folders=()):
        """input_folders: folders, or (folder, file) pairs where the folder is an input file's
        (named in the refusal), or (folder, None)."""
        self.root = Path(root)
        self.folders = {}  # identity -> the folder as given
        self.files = {}  # identity -> the input file whose folder it is, when one is
        for item in input_folders:
            folder, file = item if isinstance(item, tuple) else (item, None)
            ident = identity(folder)
            if ident is not None and ident not in self.folders:
                self.folders[ident] = os.path.normpath(folder)
                if file is not None:
                    self.files[ident] = file
        inside = self.input_folder(self.root)
        if inside is not None:
            raise ValueError(f"--out-dir {self.root} is the input folder {self.named(inside)} "
                             f"or inside it: predictions would be written among (or over) "
                             f"its images; choose an --out-dir outside every input folder.")
        for folder in sorted(set(self.folders.values())):
            where = self.root / placed(folder)
            inside = self.input_folder(where)
            if inside is not None:
                raise ValueError(f"--out-dir {self.root} would put the predictions of {folder}/ "
                                 f"in {where.as_posix()}, inside the input folder "
                                 f"{self.named(inside)} (among or over its images); choose an "
                                 f"--out-dir outside every input folder.")

    def named(self, folder: str) -> str:
        """An input folder as a refusal names it: `folder/`, and the input file it holds when
        it is a file's folder."""
        file = self.files.get(identity(folder))
        return f"{folder}/" + (f" (the folder of the input {file})" if file else "")

    def input_folder(self, path) -> str | None:
        """The input folder path is (or would be) inside, or None."""
        for ident in real_folders(path):
            if ident in self.folders:
                return self.folders[ident]
        return None

    def target(self, path, name: str) -> Path:
        """Where the prediction file `name` (a file name) of input `path` goes."""
        return self.root / placed(path).parent / name

    def refuse(self, target: Path, path: str, ours) -> str:
        """Why predict may not write target, the prediction file of input path ("" when it
        may): inside an input folder, the input itself, a symlink or not a regular file, or
        an existing file that predict did not write for this input (ours(target) -> the
        input predict wrote it for, or None)."""
        folder = self.input_folder(target.parent)
        if folder is not None:
            return f"{target.as_posix()} is inside the input folder {folder}/"
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            return ""
        except OSError as exc:
            return f"{target.as_posix()} cannot be checked ({exc.strerror})"
        if stat.S_ISLNK(st.st_mode):
            return f"{target.as_posix()} is a symlink (predict never writes through one)"
        if identity(target) == identity(path):
            return f"{target.as_posix()} is the input itself"
        if not stat.S_ISREG(st.st_mode):
            return f"{target.as_posix()} exists and is not a regular file"
        wrote_for = ours(target)
        if wrote_for is None:
            return f"{target.as_posix()} exists and predict did not write it"
        if wrote_for != path:
            return f"{target.as_posix()} exists: predict wrote it for {wrote_for}"
        return ""
