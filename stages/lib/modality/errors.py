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


# The kinds of bad input, the same for every modality: {kind: (the HTTP status serve answers
# when no file of a request is usable, what the kind means)}. The one place a status for bad
# input is written: serve, its --help, its /openapi.json and docs/predict-serve.md read it
# from here. "{one}", "{size}": the served modality's words for one of its files and the size
# its files are limited by (WORDS).
KINDS = {
    "unsupported": (415, "not {one}: no format the modality reads"),
    "too_long": (413, "over the duration limit (seconds or frames), read from the header"),
    "too_large": (422, "over a size limit ({size}, or serve's decode budget), read from the "
                       "header: never decoded"),
    "corrupt": (422, "truncated or broken, or one of validate's blocking checks fails"),
    "unreadable": (422, "cannot be opened (missing, no permission, a symlink loop, a socket)"),
    "not_regular": (422, "a FIFO or a device: never read"),
    # serve's own: a request whose body is over --max-bytes, refused before a file is read
    "body_too_large": (413, "a request body over --max-bytes"),
}
STATUS = {kind: status for kind, (status, _) in KINDS.items()}
# No file of a request is usable, for kinds of different statuses (an unsupported file and a
# corrupt one): the request's status.
MIXED_STATUS = 422
# Each modality's words for its files (by modality name: stages/lib/modality MODALITIES): one
# file, several, and the size a file is limited by
WORDS = {"image": {"one": "an image", "many": "images", "size": "pixels"},
         "audio": {"one": "a sound file", "many": "sound files", "size": "bytes"}}


def request_status(kinds) -> int:
    """The status of a request in which no file is usable: its files' kinds' one status, or
    MIXED_STATUS when they have several."""
    statuses = {STATUS[kind] for kind in kinds}
    return statuses.pop() if len(statuses) == 1 else MIXED_STATUS


def meaning(kind: str, modalities=("image",)) -> str:
    """What kind means, in the words of the modalities served (their names)."""
    names = list(dict.fromkeys(modalities))
    return KINDS[kind][1].format(**{key: " or ".join(WORDS[name][key] for name in names)
                                    for key in ("one", "size")})


class BadInput(ValueError):
    """An input that cannot become model input.

    `kind`: one of KINDS but body_too_large ("unsupported": not a file of the modality's
    formats, "too_long", "too_large", "corrupt", "unreadable": missing file, no permission, a
    symlink loop, a socket, or "not_regular": a FIFO, a device, never read).
    """

    def __init__(self, kind: str, message: str):
        if kind not in KINDS:
            raise ValueError(f"unknown kind of bad input {kind!r}; one of {', '.join(KINDS)}")
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
