"""What a modality's guarded read (predict's and serve's decode) raises, and the open it reads
through: an input that cannot become model input is a BadInput naming what is wrong, never a
crash, so predict writes an error row and serve answers with the reason."""
import errno
import os


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
    import io
    import stat

    from stages.lib.io import mode_kind

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        why = {errno.ENXIO: "a socket (not read)", errno.ELOOP: "a symlink loop"}.get(
            exc.errno, f"{type(exc).__name__}: {exc.strerror}")
        raise BadInput("unreadable", f"cannot open: {why}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise BadInput("not_regular", f"{mode_kind(mode)}: not read")
    os.set_blocking(fd, True)
    return io.BufferedReader(io.FileIO(fd, "rb"))
