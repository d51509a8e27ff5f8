"""Issue 41, items 4 and 5: file names that break a CSV row, and names that are not UTF-8.

Item 4: a name with "\\r", "\\n", ",", '"' or a leading "=" goes through ingest, validate and
split named exactly (every such field quoted; nothing renamed). Item 5: a file or folder name
with bytes that are not UTF-8 is named, escaped, with the fix (rename it), by ingest, by
`tools.doctor` and by `tools.init --source`, before DVC walks the folder. Real files, real
stage runs.
"""
import csv
import os
import sys

import pytest

from tests.conftest import ROOT, run_stage, run_tool, write_image
from tests.test_gate_hardening import params, snapshot
from tools.project import copy_project

ODD = ["a\rb.png", "c\nd.png", "e,f.png", 'g"h.png', "=HYPERLINK(1).png", "+1.png",
       "cr at end\r.png", "\r\n.png"]


def tree(source, odd=()):
    """Two classes of 7 grey 16x16 images, plus `odd` names under cat/ (distinct pixels)."""
    for c, name in enumerate(("cat", "dog")):
        for i in range(7):
            write_image(source / name / f"{i}.png", seed=100 * c + i)
    for k, name in enumerate(odd):
        write_image(source / "cat" / name, seed=500 + k)


def rows(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.mark.skipif(sys.platform == "win32", reason="names with \\r, \\n and \" are POSIX's")
def test_names_that_break_a_csv_row_survive_ingest_validate_and_split_exactly(in_tmp):
    source = in_tmp / "src"
    tree(source, ODD)
    before = snapshot(source)
    params(in_tmp, source, task="classification")
    for stage in ("ingest", "validate", "split"):
        proc = run_stage(stage, cwd=in_tmp)
        assert proc.returncode == 0, (stage, proc.stdout + proc.stderr)
        assert "Traceback" not in proc.stderr
    expected = sorted(p.relative_to(source).as_posix() for p in source.rglob("*.png"))
    manifest = rows(in_tmp / "data/manifest.csv")
    assert [r["path"] for r in manifest] == expected
    assert all(not r["error"] for r in manifest), [r for r in manifest if r["error"]]
    assert {r["path"]: r["label"] for r in manifest if "/" in r["path"]}[f"cat/{ODD[0]}"] == "cat"
    split = sorted(r["path"] for name in ("train", "val", "test")
                   for r in rows(in_tmp / f"data/split/{name}.csv"))
    assert split == expected  # every file, named exactly, in exactly one split
    # the leading "=" is kept as it is (no apostrophe added): the manifest is data, not a sheet
    raw = (in_tmp / "data/manifest.csv").read_bytes()
    assert b"\ncat/=HYPERLINK(1).png," in raw and b'"cat/a\rb.png"' in raw
    assert snapshot(source) == before  # nothing renamed


def test_a_bare_carriage_return_is_quoted_and_other_rows_keep_their_bytes():
    import io

    from stages.lib.io import csv_bytes

    plain = [{"path": "cat/0.png", "label": "cat"}, {"path": "e,f.png", "label": ""}]
    assert csv_bytes(plain, ["path", "label"]) == b'path,label\ncat/0.png,cat\n"e,f.png",\n'
    odd = [*plain, {"path": "a\rb.png", "label": "cat"}]
    out = csv_bytes(odd, ["path", "label"])
    assert out == b'path,label\ncat/0.png,cat\n"e,f.png",\n"a\rb.png","cat"\n'
    assert list(csv.DictReader(io.StringIO(out.decode(), newline=""))) == odd


def bad_names(source):
    """A file and a folder whose names are Latin-1 bytes, not UTF-8 (Linux keeps any bytes)."""
    base = os.fsencode(source)
    os.rename(os.fsencode(source / "cat/0.png"), base + b"/cat/caf\xe9.png")
    os.mkdir(base + b"/d\xe9j\xe0")
    os.rename(os.fsencode(source / "dog/0.png"), base + b"/d\xe9j\xe0/x.png")
    return ["cat/caf\\xe9.png", "d\\xe9j\\xe0"]


@pytest.mark.skipif(sys.platform != "linux", reason="names of raw bytes: Linux filesystems")
def test_names_that_are_not_utf8_are_named_by_ingest_doctor_and_init(in_tmp):
    from tools.doctor import FAIL, source_findings

    source = in_tmp / "src"
    tree(source)
    shown = bad_names(source)
    params(in_tmp, source, task="classification")
    proc = run_stage("ingest", cwd=in_tmp)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert all(name in line for name in shown) and "Rename each to UTF-8" in line, line
    assert not (in_tmp / "data/manifest.csv").exists()

    (in_tmp / "params.yaml").write_text("data:\n  source: src\n")
    [finding] = source_findings(in_tmp)
    assert finding.level == FAIL and "not UTF-8" in finding.message, finding
    assert all(f"src/{name}" in finding.message for name in shown), finding.message
    assert "x.png" not in finding.message  # a bad folder is named once, not file by file
    assert "rename" in finding.fix
    finding.message.encode("utf-8")  # printable: no raw byte reaches the terminal

    project = copy_project(ROOT, in_tmp / "project")
    proc = run_tool("init", "--task", "classification", "--source", str(source), cwd=project)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert all(name in proc.stderr for name in shown) and "Rename" in proc.stderr, proc.stderr
