"""bench/ocr_fonts.py's own pieces (issue 45): fonts picked by name from a folder, the
Tesseract column when Tesseract is missing, and how a Tesseract run is read back. Offline and
small: fonts are matplotlib's (pinned), Tesseract is never needed (a stand-in script plays it)."""
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.ocr_tesseract import MISSING, font_files, pick_fonts, tesseract, tesseract_spawned
from tests.conftest import ROOT


def mpl_fonts() -> Path:
    import matplotlib

    return Path(matplotlib.__file__).parent / "mpl-data" / "fonts" / "ttf"


@pytest.fixture
def folder(tmp_path) -> Path:
    """ttf/A.ttf, otf/A.otf (the same stem, two formats), x/B.ttf and y/B.ttf (ambiguous)."""
    src = mpl_fonts()
    for rel, name in (("ttf/A.ttf", "DejaVuSans"), ("otf/A.otf", "DejaVuSerif"),
                      ("x/B.ttf", "DejaVuSansMono"), ("y/B.ttf", "DejaVuSans-Bold")):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / f"{name}.ttf", tmp_path / rel)
    (tmp_path / "x" / "readme.txt").write_text("not a font")
    return tmp_path


def test_fonts_are_named_by_file_and_a_ttf_wins_over_an_otf(folder):
    found = font_files(folder)
    assert found["A"] == folder / "ttf" / "A.ttf"  # .ttf before .otf
    assert found["B"] is None  # two .ttf files: ambiguous by name
    assert found["x/B"] == folder / "x" / "B.ttf" and found["y/B"] == folder / "y" / "B.ttf"
    assert "readme" not in found
    assert pick_fonts(folder, ["x/B", "A"]) == [("x/B", folder / "x" / "B.ttf"),
                                               ("A", folder / "ttf" / "A.ttf")]


def test_a_missing_or_ambiguous_font_is_named_with_what_the_folder_has(folder):
    with pytest.raises(ValueError) as err:
        pick_fonts(folder, ["A", "B", "Comic"])
    text = str(err.value)
    assert "B: found twice" in text and "Comic: not found" in text and "A:" not in text
    assert "it has 3 fonts: A, x/B, y/B" in text


def test_fonts_from_several_folders_and_a_name_in_two_of_them_is_ambiguous(folder, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(mpl_fonts() / "DejaVuSerif.ttf", other / "C.ttf")
    shutil.copy(mpl_fonts() / "DejaVuSans.ttf", other / "A.ttf")
    assert pick_fonts([folder / "x", other], ["B", "C"]) == [("B", folder / "x" / "B.ttf"),
                                                              ("C", other / "C.ttf")]
    with pytest.raises(ValueError, match="A: found twice"):
        pick_fonts([folder / "ttf", other], ["A"])


def test_the_debian_wide_set_never_trains_on_a_held_out_design():
    from bench.ocr_font_sets import SETS

    train, held, _ = SETS["debian-wide"]
    assert len(set(train)) == len(train) and len(set(held)) == len(held)
    assert not set(train) & set(held)
    clones = ("texgyreadventor", "texgyreschola", "PTC", "PTN", "NotoSans", "Lato", "Cabin",
              "Caladea", "CharisSIL", "LinLibertine", "Inconsolata", "URWGothic", "C059")
    assert not [f for f in train if f.startswith(clones)]


def fake_tesseract(folder: Path, body: str) -> Path:
    exe = folder / "tesseract"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def lines(n=3):
    rng = np.random.default_rng(0)
    return [rng.integers(150, 255, (32, 40 + 10 * i), dtype=np.uint8) for i in range(n)]


def test_tesseract_reads_one_page_per_line_back(tmp_path, monkeypatch):
    """One process for the list; each line padded and upscaled; pages split at form feeds."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # prints "line<k>" per listed image, each page ended by a form feed, as tesseract does
    fake_tesseract(bin_dir, 'n=0; while read f; do printf "  word  %s\\n\\f" "$n"; '
                            'n=$((n+1)); done < "$1"\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    texts, cpu = tesseract(lines(), tmp_path / "work", scale=2)
    assert texts == ["word 0", "word 1", "word 2"]
    assert cpu >= 0
    from PIL import Image

    first = Image.open(tmp_path / "work" / "line00000.png")
    assert first.size == ((40 + 16) * 2, (32 + 16) * 2)  # padded 8 px a side, then 2x
    assert tesseract_spawned(tmp_path / "work", 2) >= 0


def test_tesseract_that_drops_a_page_is_an_error(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tesseract(bin_dir, 'printf "only one\\f"\n')
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(RuntimeError, match="1 pages for 3 lines"):
        tesseract(lines(), tmp_path / "work")


def test_without_tesseract_the_bench_says_so_and_goes_on(tmp_path):
    """No tesseract on PATH: the column is skipped with a line saying how to install it."""
    assert tesseract(lines(), tmp_path, binary="no-such-tesseract-here") is None
    bin_dir = tmp_path / "bin"  # PATH with only the python that runs the bench
    bin_dir.mkdir()
    os.symlink(sys.executable, bin_dir / "python")
    env = {**os.environ, "PATH": str(bin_dir), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.ocr_fonts", "--train-fonts", "DejaVuSans",
         "--held-out", "DejaVuSerif", "--train-lines", "2", "--test-lines", "2",
         "--variants", "", "--threads", "1", "--json", str(tmp_path / "rows.json")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert MISSING in proc.stdout
    assert (tmp_path / "rows.json").read_text().strip() == "[]"


def test_the_bench_names_a_font_it_cannot_find(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.ocr_fonts", "--fonts-dir", str(mpl_fonts()),
         "--train-fonts", "DejaVuSans,Comic", "--held-out", "DejaVuSerif", "--variants", ""],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Comic: not found" in proc.stderr and "DejaVuSans-Bold" in proc.stderr


def test_the_bench_models_can_write_every_character_of_its_lines_space_included():
    """A charset without the space made every space between words an error (CER near 0.1 on
    lines read right otherwise)."""
    from bench.ocr_fonts import CHARSET, WORDS

    assert " " in CHARSET and set(WORDS) == set(CHARSET)
    assert set("0123456789") <= set(CHARSET) and sum(c.isalpha() for c in CHARSET) == 52
