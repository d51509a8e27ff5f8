"""The OCR gate (issue 20): one list holding every bad kind; validate names each bad line and
its check, collects all of them, and leaves the files untouched. Plus the three input layouts
(rec_gt.txt, JSONL, x.png + x.txt) read into the manifest."""
import json

import pytest

from tests.conftest import copy_ocr_project, ocr_params, run_stage, write_image
from stages.lib.io import read_csv

GOOD = [("ok/a.png", "hello", (60, 32)), ("ok/b.png", "world 42", (90, 32)),
        ("ok/c.png", "中山 7", (70, 32))]


def make_list_tree(root):
    """data.source with a rec_gt.txt exercising every check; {path: the check it must fail}."""
    lines = [f"{p}\t{t}".encode() for p, t, _ in GOOD]
    for i, (p, _, size) in enumerate(GOOD):
        write_image(root / p, size=size, seed=i)
    expect = {}

    def add(path, text, size, check, seed):
        write_image(root / path, size=size, seed=seed)
        lines.append(path.encode() + b"\t" + text)
        expect[path] = check

    add("bad/empty.png", b"", (40, 32), "empty_text", 10)
    add("bad/long.png", b"abcdefghijkl", (20, 32), "too_long", 11)  # 5 frames < 12
    add("bad/repeats.png", b"aabbcc", (28, 32), "too_long", 12)  # 7 frames < 6 + 3 repeats
    add("bad/unknown.png", "café".encode(), (60, 32), "unknown_char", 13)
    add("bad/tall.png", b"x", (10, 40), "aspect", 14)
    add("bad/dup.png", b"one", (40, 32), "duplicate_entry", 15)
    lines.append(b"bad/dup.png\ttwo")
    lines.append(b"bad/missing.png\tghost")
    expect["bad/missing.png"] = "missing"
    write_image(root / "bad/latin1.png", size=(40, 32), seed=16)
    lines.append(b"bad/latin1.png\tcaf\xe9")  # Latin-1, not UTF-8: the list is named
    expect["bad/latin1.png"] = "unlabelled"  # its entry cannot be read
    expect["rec_gt.txt"] = "bad_list"
    write_image(root / "bad/unlisted.png", size=(40, 32), seed=17)
    expect["bad/unlisted.png"] = "unlabelled"
    lines.append(b"no tab on this line")
    write_image(root / "warn/space.png", size=(60, 32), seed=18)
    lines.append(b"warn/space.png\t hello ")
    (root / "rec_gt.txt").write_bytes(b"\n".join(lines) + b"\n")
    return expect


@pytest.fixture
def gate_project(tmp_path):
    params = ocr_params(**{"data.source": "data/lines",
                           "validate.charset": "abcdefghijklmnopqrstuvwxyz0123456789 中山"})
    return copy_ocr_project(tmp_path / "project", params)


def test_gate_names_every_bad_line_with_its_check(gate_project):
    root = gate_project / "data/lines"
    expect = make_list_tree(root)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert run_stage("ingest", cwd=gate_project).returncode == 0
    proc = run_stage("validate", cwd=gate_project)
    assert proc.returncode != 0
    for path, check in expect.items():
        assert f"[{check}] {path}:" in proc.stderr, (path, check, proc.stderr)
    assert "not UTF-8 on 1 line(s)" in proc.stderr and "has no TAB" in proc.stderr
    assert "needs 9 CTC frames (6 characters + 3 adjacent repeats)" in proc.stderr
    assert "'é'" in proc.stderr
    for good, _, _ in GOOD:
        assert good not in proc.stderr
    assert "warn/space.png" not in proc.stderr  # a warning, not a failure
    counts = json.loads((gate_project / "metrics/validation_checks.json").read_text())
    assert counts["whitespace"] == 1 and counts["too_long"] == 2
    assert counts["bad_list"] == 1 and counts["duplicate_entry"] == 1
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before  # untouched


def test_jsonl_and_pairs_layouts_reach_the_manifest(gate_project):
    root = gate_project / "data/lines"
    write_image(root / "x/a.png", size=(60, 32), seed=1)
    write_image(root / "x/b.png", size=(60, 32), seed=2)
    (root / "labels.jsonl").write_text(
        json.dumps({"path": "x/a.png", "text": "大 9"}) + "\n"
        + json.dumps({"path": "x/b.png", "text": "b,c"}) + "\n"
        + json.dumps({"path": "x/b.png", "text": "again"}) + "\n", encoding="utf-8")
    assert run_stage("ingest", cwd=gate_project).returncode == 0
    rows = {r["path"]: r for r in read_csv(gate_project / "data/manifest.csv")}
    assert set(rows) == {"x/a.png", "x/b.png"}
    assert rows["x/a.png"]["text"] == "大 9" and len(rows["x/a.png"]["text_sha256"]) == 64
    assert rows["x/b.png"]["error_kind"] == "duplicate_entry"

    (root / "labels.jsonl").unlink()  # now pairs: x.png + x.txt
    (root / "x/a.txt").write_text("大 9\n", encoding="utf-8")
    (root / "x/b.txt").write_bytes(b"caf\xe9")
    (root / "x/c.txt").write_text("orphan", encoding="utf-8")
    assert run_stage("ingest", cwd=gate_project).returncode == 0
    rows = {r["path"]: r for r in read_csv(gate_project / "data/manifest.csv")}
    assert set(rows) == {"x/a.png", "x/b.png", "x/c.txt"}
    assert rows["x/a.png"]["text"] == "大 9" and not rows["x/a.png"]["error"]
    assert rows["x/b.png"]["error_kind"] == "bad_list" and "not UTF-8" in rows["x/b.png"]["error"]
    assert rows["x/c.txt"]["error_kind"] == "missing"
