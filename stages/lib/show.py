"""How user strings and numbers appear in logs and errors, in one place: none reaches a
terminal raw.

A file name, class name or transcript comes from the user's data and may hold control
characters (ESC starts a terminal escape sequence, NUL, a bidi override U+202E that reverses
the rest of the line, zero-width spaces, line separators). `text()` escapes every such character
before a stage prints it; `number()` keeps a huge float short; `some()` names a capped list.
Only the standard library: every stage imports this.
"""
import unicodedata

# control (Cc), format: zero-width, bidi overrides... (Cf), line and paragraph separators, and
# surrogates (Cs): a file name's bytes that are not UTF-8 (os.fsdecode keeps byte 0xff as
# U+DCFF), which no terminal can print
INVISIBLE = ("Cc", "Cf", "Zl", "Zp", "Cs")


def invisible(char: str) -> bool:
    """A character that shows nothing of its own on a terminal, or moves or recolours what
    follows (NUL, ESC, U+200B, U+202E, U+2028...)."""
    return unicodedata.category(char) in INVISIBLE

SHOWN = 60  # characters of a transcript a message quotes; the rest is counted
SHOWN_CHARS = 20  # distinct characters a message lists at most


def only_invisible(text: str) -> bool:
    """Not blank, yet nothing but invisible characters and whitespace."""
    return bool(text.strip()) and all(invisible(c) or c.isspace() for c in text)


def clip(text: str) -> str:
    """A transcript as a message quotes it: its repr (invisible characters escaped), cut to
    SHOWN characters with the length after it."""
    if len(text) <= SHOWN:
        return repr(text)
    return f"{text[:SHOWN]!r}… ({len(text)} chars)"


def listed(chars) -> str:
    """Distinct characters as U+XXXX (sorted), SHOWN_CHARS at most and how many more."""
    chars = sorted(set(chars))
    more = len(chars) - SHOWN_CHARS
    return ", ".join(f"U+{ord(c):04X}" for c in chars[:SHOWN_CHARS]) + (
        f" and {more} more" if more > 0 else "")


def outside(text: str, charset) -> str:
    """The characters of text not in charset, as validate's unknown_char message lists them."""
    allowed = set(charset)
    bad = sorted({c for c in text if c not in allowed})
    more = len(bad) - SHOWN_CHARS
    return (f"characters outside validate.charset: {' '.join(map(repr, bad[:SHOWN_CHARS]))}"
            + (f" and {more} more" if more > 0 else ""))


def repeats(text: str) -> int:
    """Adjacent repeated characters: each needs a blank CTC frame between its two."""
    return sum(a == b for a, b in zip(text, text[1:], strict=False))


def text(value, keep: str = "") -> str:
    """value as printable text: every invisible character (but those in `keep`, such as a
    message's own line breaks) written as its escape (\\x1b, \\u202e), so the printed line
    shows exactly what the string holds. A byte of a file name that is not UTF-8 shows as
    that byte (\\xff), as Python writes bytes."""
    s = str(value)
    if not any(invisible(c) and c not in keep for c in s):
        return s
    return "".join((f"\\x{ord(c):02x}" if ord(c) < 0x100 else
                    f"\\x{ord(c) - 0xdc00:02x}" if 0xdc80 <= ord(c) <= 0xdcff else
                    f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}")
                   if invisible(c) and c not in keep else c for c in s)


def number(value: float, spec: str = ".4f") -> str:
    """value in `spec` while that stays short, else in 4 significant digits (1e308 is
    `1e+308`, not 309 digits)."""
    out = format(value, spec)
    return out if len(out) <= 16 else format(value, ".4g")


def some(items, cap: int = 5) -> str:
    """The first `cap` items, escaped and comma-separated, then how many more."""
    items = list(items)
    shown = ", ".join(text(i) for i in items[:cap])
    return shown + (f" and {len(items) - cap} more" if len(items) > cap else "")


def undecodable(name: str) -> bool:
    """Whether a name (from os.listdir of a str path) holds bytes that are not UTF-8: it
    cannot be written to a UTF-8 file (the manifest) nor hashed by DVC."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
