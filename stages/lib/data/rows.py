"""A CSV table held as its text: about the file's bytes per row, where read_csv's dicts cost
about five times that (100,000 split rows of path, label, sha256: 8 MiB against 40 MiB).

`read_rows(path)` gives a `Rows`: a sequence of the same dicts `read_csv` gives (csv.DictReader
over the file's lines, blank rows skipped, the same restkey/restval), parsed again each time
they are read. A slice shares the text; pickled, it carries only its own records' text, so it
is what prepare sends a worker for one shard. Only the standard library here.
"""
import csv
import io
import re
from array import array
from pathlib import Path

from stages.lib.csvlimit import FIELD_LIMIT  # noqa: F401 - importing it raises csv's limit

# a line as open(newline="") reads it: up to and including \n, \r or \r\n
_LINE = re.compile(r"[^\r\n]*(?:\r\n?|\n)|[^\r\n]+")
_EOL = re.compile(r"\r\n?|\n")
_CHUNK = 4096  # records parsed at a time: io.StringIO holds 4 bytes a character


class Rows:
    """fields: the header; record i is text[ends[i - 1] (start for the first):ends[i]] (a
    record may span lines: a quoted field with a newline; blank rows before it go with it)."""

    def __init__(self, fields, text: str, ends: array, start: int = 0):
        self.fields, self.text, self.ends, self.start = fields, text, ends, start

    def __len__(self):
        return len(self.ends)

    def __iter__(self):
        if self.fields is None:
            return
        for i in range(0, len(self), _CHUNK):
            first = self.ends[i - 1] if i else self.start
            last = self.ends[min(i + _CHUNK, len(self)) - 1]
            yield from csv.DictReader(io.StringIO(self.text[first:last], newline=""),
                                      self.fields)

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


def record_ends(text: str, start: int) -> array:
    """The end offset of each record of text[start:] (csv.DictReader's: blank rows are none)."""
    if '"' not in text:  # no quoting: a record is a line that is not empty
        ends, prev = array("q"), start
        for m in _EOL.finditer(text, start):
            if m.start() > prev:
                ends.append(m.end())
            prev = m.end()
        if prev < len(text):
            ends.append(len(text))
        return ends
    at = start

    def lines():  # counting the characters csv.reader has taken
        nonlocal at
        for m in _LINE.finditer(text, start):
            at = m.end()
            yield m.group()

    return array("q", (at for row in csv.reader(lines()) if row))


def read_rows(path) -> Rows:
    """The rows of a CSV file, as `read_csv` reads them, held as the file's text."""
    from stages.lib.io import StageError

    path = Path(path)
    if not path.exists():
        raise StageError(f"{path} not found: run the stage that writes it first (`dvc repro`).")
    with open(path, newline="", encoding="utf-8") as f:
        text = f.read()
    at = 0

    def lines():  # the header's lines only: csv.reader takes them as it needs them
        nonlocal at
        for m in _LINE.finditer(text):
            at = m.end()
            yield m.group()

    fields = next(csv.reader(lines()), None)
    body = at
    return Rows(fields, text, record_ends(text, body), body)
