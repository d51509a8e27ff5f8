"""A CSV table held as its text: about the file's bytes per row, where read_csv's dicts cost
about five times that (100,000 split rows of path, label, sha256: 8 MiB against 40 MiB).

`read_rows(path)` gives a `Rows`: a sequence of the same dicts `read_csv` gives (csv.DictReader
over the file's lines, blank rows skipped, the same restkey/restval), parsed again each time
they are read. A slice shares the text; pickled, it carries only its own records' text, so it
is what prepare sends a worker for one shard. Only the standard library here.
"""
import csv
import re
from array import array
from pathlib import Path

# a line as open(newline="") reads it: up to and including \n, \r or \r\n
_LINE = re.compile(r"[^\r\n]*(?:\r\n?|\n)|[^\r\n]+")


def _lines(text: str, start: int, end: int):
    return (m.group() for m in _LINE.finditer(text, start, end))


class Rows:
    """fields: the header; record i is text[ends[i - 1] (start for the first):ends[i]] (a
    record may span lines: a quoted field with a newline; blank rows before it go with it)."""

    def __init__(self, fields, text: str, ends: array, start: int = 0):
        self.fields, self.text, self.ends, self.start = fields, text, ends, start

    def __len__(self):
        return len(self.ends)

    def __iter__(self):
        if not self.fields or not self.ends:
            return iter(())
        return csv.DictReader(_lines(self.text, self.start, self.ends[-1]), self.fields)

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                return list(self)[key]
            stop = max(start, stop)
            return Rows(self.fields, self.text, self.ends[start:stop],
                        self.ends[start - 1] if start else self.start)
        i = key + len(self) if key < 0 else key
        if not 0 <= i < len(self):
            raise IndexError(f"row {key} of {len(self)}")
        return next(iter(self[i:i + 1]))

    def __reduce__(self):  # only this slice's text travels
        end = self.ends[-1] if self.ends else self.start
        return Rows, (self.fields, self.text[self.start:end],
                      array("q", (e - self.start for e in self.ends)))

    def __repr__(self):
        return f"Rows({len(self)} rows of {self.fields})"


def read_rows(path) -> Rows:
    """The rows of a CSV file, as `read_csv` reads them, held as the file's text."""
    from stages.lib.io import StageError

    path = Path(path)
    if not path.exists():
        raise StageError(f"{path} not found: run the stage that writes it first (`dvc repro`).")
    with open(path, newline="", encoding="utf-8") as f:
        text = f.read()
    at = 0

    def lines():  # counting the characters csv.reader has taken
        nonlocal at
        for line in _lines(text, 0, len(text)):
            at += len(line)
            yield line

    reader = csv.reader(lines())
    fields = next(reader, None)
    body, ends = at, array("q")
    for row in reader:
        if row:  # csv.DictReader skips blank rows
            ends.append(at)
    return Rows(fields, text, ends, body)
