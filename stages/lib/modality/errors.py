"""What a modality's guarded read (predict's and serve's decode) raises, and the open it reads
through: an input that cannot become model input is a BadInput naming what is wrong, never a
crash, so predict writes an error row and serve answers with the reason."""
import errno
import os
import re

from stages.lib import safefs

# an object's repr in a decoder's message: `<_io.BytesIO object at 0x7f...>`, different each run
_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")


def decode_error(exc: BaseException, path=None) -> str:
    """`Type: message` of a decoder's exception, the same on every run and machine, so that it
    can go into an out (the manifest, the quarantine list): no object's repr or memory address
    (Pillow's "cannot identify image file <_io.BytesIO object at 0x...>"), and `path` (what was
    opened) as its name only, never an absolute path; one line."""
    name = type(exc).__name__
    if name == "UnidentifiedImageError":  # its message is only the file's repr or path
        return f"{name}: not an image format Pillow knows"
    text = str(exc).replace("\r", " ").replace("\n", " ")
    if path is not None and not hasattr(path, "read"):
        full = os.fspath(path)
        text = text.replace(os.path.abspath(full), os.path.basename(full))
        text = text.replace(full, os.path.basename(full))
    text = _ADDRESS.sub("0x…", _REPR.sub("the file", text))
    return f"{name}: {text}" if text else name


class BadInput(ValueError):
    """An input that cannot become model input.

    `kind`: "not_image" (not a file of the modality's formats), "corrupt", "too_large",
    "unreadable" (missing file, no permission, a symlink loop, a socket) or "not_regular" (a
    FIFO, a device: never read).
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def open_regular(path):
    """A binary file object on path, which must be a regular file; BadInput ("unreadable" or
    "not_regular") otherwise. Opened non-blocking and checked with fstat before a byte is
    read, so a FIFO, socket or device is never read from (a FIFO would block forever)."""
    try:
        return safefs.open_regular(path)
    except OSError as exc:
        why = {errno.ENXIO: "a socket (not read)", errno.ELOOP: "a symlink loop"}.get(
            exc.errno, f"{type(exc).__name__}: {exc.strerror}")
        raise BadInput("unreadable", f"cannot open: {why}") from None
    except safefs.NotRegular as exc:
        raise BadInput("not_regular", f"{safefs.mode_text(exc.mode)}: not read") from None
