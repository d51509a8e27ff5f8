"""What a modality's guarded read (predict's and serve's decode) raises, and the open it reads
through: an input that cannot become model input is a BadInput naming what is wrong, never a
crash, so predict writes an error row and serve answers with the reason."""
import errno

from stages.lib import safefs


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
