"""stages/lib/data/rows.py: a CSV table held as its text reads back as exactly read_csv's dicts,
whole, sliced, indexed and pickled (what prepare sends its workers)."""
import pickle

import pytest

from stages.lib.io import StageError, read_csv
from stages.lib.data.rows import read_rows

# quoted commas and newlines (a detection box list, an OCR line), CRLF and lone CR line ends,
# blank lines (csv.DictReader skips them), a short and a long row (restval / restkey),
# non-ASCII text, a last line without a newline
TRICKY = ('path,label,text\r\n'
          'a/1.jpg,cat,"x, y"\r\n'
          '\r\n'
          'a/2.jpg,dog,"two\nlines"\n'
          'b/3.jpg,cat\r'
          'b/4.jpg,ünï,"q""uote",extra,more\n'
          '\n\n'
          'c/5.jpg,,"ends\r\nwith CRLF inside"\n'
          'c/6.jpg,bird,last')
# no quote character: the fast path (a record is a line that is not empty)
PLAIN = ('path,label\r\n\r\na/1.jpg,cat\r\n\na/2.jpg,dog\rb/3.jpg\nb/4.jpg,ünï,x,y\n'
         '\n\n \n,\nc/6.jpg,bird')


@pytest.mark.parametrize("body", [TRICKY, TRICKY + "\n", PLAIN, PLAIN + "\r\n\r\n",
                                  '"pa\nth",label\nx,"y"\n', "path,label\n", "path,label", ""])
def test_rows_read_as_read_csv(tmp_path, body):
    path = tmp_path / "t.csv"
    path.write_bytes(body.encode())
    want, rows = read_csv(path), read_rows(path)
    assert list(rows) == want and len(rows) == len(want)
    for i in range(-len(want), len(want)):
        assert rows[i] == want[i]
    for a in range(len(want) + 1):
        for b in range(len(want) + 2):
            part = rows[a:b]
            assert list(part) == want[a:b] and len(part) == len(want[a:b])
            assert list(pickle.loads(pickle.dumps(part))) == want[a:b]
            assert list(part[1:]) == want[a:b][1:]
    assert list(rows[::2]) == want[::2]
    if len(want) > 2:
        assert len(pickle.dumps(rows[1:2])) < len(pickle.dumps(rows)) - 40  # only its text
    with pytest.raises(IndexError):
        rows[len(want)]


def test_a_missing_table_names_the_stage_to_run(tmp_path):
    with pytest.raises(StageError, match="t.csv not found"):
        read_rows(tmp_path / "t.csv")
