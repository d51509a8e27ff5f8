"""Issue 54, items 1, 12, 13 and 14 (`--out .`): tools.synth_ocr replaces only a folder it
marked itself, never a user's, reads --words within a bound and only from a regular file, and
writes no line validate's aspect check would block."""
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_tool, write_image
from tests.test_ocr_fonts import mpl_fonts


@pytest.fixture(scope="module")
def fonts(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fonts4") / "fonts"
    folder.mkdir()
    shutil.copy(mpl_fonts() / "DejaVuSans.ttf", folder / "DejaVuSans.ttf")
    (folder.parent / "words.txt").write_text("Invoice total paid due Street\n", encoding="utf-8")
    return folder


def synth(fonts, out, *more, words=None, cwd=None, lines="3"):
    return run_tool("synth_ocr", "--fonts", fonts, "--words", words or fonts.parent / "words.txt",
                    "--lines", lines, "--out", out, *more, cwd=cwd)


def test_a_users_jsonl_folder_is_never_replaced(fonts, tmp_path):
    """Item 1: a hand-labelled set in the JSONL layout (a lines.jsonl) is not synth_ocr's."""
    mine = tmp_path / "mine"
    (mine / "images").mkdir(parents=True)
    (mine / "lines.jsonl").write_text('{"path": "images/a.png", "text": "hand"}\n')
    (mine / "notes.txt").write_text("keep me")
    proc = synth(fonts, mine)
    assert proc.returncode == 2, proc.stderr
    assert "was not written by synth_ocr" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert (mine / "notes.txt").read_text() == "keep me"
    assert (mine / "lines.jsonl").read_text().startswith('{"path": "images/a.png"')


def test_its_own_folder_is_replaced_and_a_users_sibling_is_kept(fonts, tmp_path):
    sibling = tmp_path / ".out.tmp"  # a user's folder, named like the old temp folder
    sibling.mkdir()
    (sibling / "work.txt").write_text("mine")
    out = tmp_path / "out"
    assert synth(fonts, out).returncode == 0
    assert (out / ".synth_ocr").is_file() and len(list((out / "images").iterdir())) == 3
    proc = synth(fonts, out, lines="2")  # its own: replaced whole
    assert proc.returncode == 0, proc.stderr
    assert len(list((out / "images").iterdir())) == 2
    assert (sibling / "work.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.tmp", "out"]


@pytest.mark.parametrize("which", ["fonts", "words", "real", "dot", "dotdot"])
def test_out_may_not_hold_the_inputs_or_the_working_directory(fonts, tmp_path, which):
    """Item 1 and 14: `--out` that holds --fonts, --words or --real, `.` or `..` is refused
    before anything is read or deleted (the fonts it just read were deleted before)."""
    project = tmp_path / "project"
    shutil.copytree(fonts.parent, project)
    for folder in (project, project / "fonts"):  # even a marked JSONL folder: inputs stay
        (folder / ".synth_ocr").write_text("")
        (folder / "lines.jsonl").write_text("")
    real = project / "real"
    real.mkdir()
    write_image(real / "images/a.png", size=(40, 16))
    (real / "lines.jsonl").write_text('{"path": "images/a.png", "text": "hand"}\n')
    before = sorted(str(p) for p in project.rglob("*"))
    sub = project / "sub"
    sub.mkdir()
    out, cwd, more = {"fonts": (project / "fonts", None, ()),
                      "words": (project, None, ()),
                      "real": (project, None, ("--real", real)),
                      "dot": (".", project, ()),
                      "dotdot": ("..", sub, ())}[which]
    proc = synth(project / "fonts", out, *more, words=project / "words.txt", cwd=cwd)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"synth_ocr: --out {out}: "), proc.stderr
    assert "empty name" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert sorted(str(p) for p in project.rglob("*") if p != sub) == before


def test_words_must_be_a_bounded_regular_file(fonts, tmp_path):
    """Item 12: /dev/zero was read whole (MemoryError), a FIFO hung forever; --lines had no
    bound."""
    proc = synth(fonts, tmp_path / "a", words="/dev/zero")
    assert proc.returncode == 2 and "--words /dev/zero: a device" in proc.stderr, proc.stderr
    fifo = tmp_path / "words.fifo"
    os.mkfifo(fifo)
    proc = synth(fonts, tmp_path / "b", words=fifo)
    assert proc.returncode == 2 and "FIFO" in proc.stderr, proc.stderr
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(64 * 2**20 + 1)
    proc = synth(fonts, tmp_path / "c", words=big)
    assert proc.returncode == 2 and "over 64 MiB" in proc.stderr, proc.stderr
    proc = synth(fonts, tmp_path / "d", lines=str(10**12))
    assert proc.returncode == 2 and "--lines" in proc.stderr and "1000000" in proc.stderr
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())


def test_no_line_is_taller_than_validate_allows(fonts, tmp_path):
    """Item 13: a word list of single narrow characters drew lines validate's aspect check
    blocks (height / width > validate.max_aspect, 2 by default)."""
    from PIL import Image

    words = tmp_path / "narrow.txt"
    words.write_text("i l - ! ' I . , : ; | j\n" + "Invoice\n", encoding="utf-8")
    out = tmp_path / "out"
    proc = synth(fonts, out, words=words, lines="60")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in (out / "lines.jsonl").read_text().splitlines()]
    sizes = [Image.open(out / r["path"]).size for r in rows]
    assert len(sizes) == 60 and all(h <= 2.0 * w for w, h in sizes), sizes
    # the check follows the pipeline's validate.max_aspect
    proc = synth(fonts, tmp_path / "tight", "--max-aspect", "0.01", words=words, lines="2")
    assert proc.returncode == 2 and "validate.max_aspect (0.01)" in proc.stderr
