"""bench/ocr_recipe.py's pieces: its corpus (seeded, the documented mix of words, numbers and
punctuation) and its reading of the held-out renderer's lines with a run's exported model
(what tools.predict answers for the same files, scored per fonts seen and crop). The whole
recipe needs Debian's font packages and an hour (docs/benchmarks.md)."""
import csv
import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from bench import ocr_recipe
from tests.conftest import run_tool

DEJAVU = Path("/usr/share/fonts/truetype/dejavu")


def test_the_corpus_is_seeded_and_mixes_words_numbers_and_punctuation(tmp_path):
    words = tmp_path / "words"
    words.write_text("apple\nBanana\nchérie\ndon't\nzebra\nquick\nbrown\n", encoding="utf-8")
    a = ocr_recipe.corpus(0, 4000, words)
    assert a == ocr_recipe.corpus(0, 4000, words) and a != ocr_recipe.corpus(1, 4000, words)
    assert all(t.isascii() for t in a)  # the accented and the apostrophe word are left out
    plain = [t for t in a if t.isalpha()]
    assert {t.lower() for t in plain} <= {"apple", "banana", "zebra", "quick", "brown"}
    assert any(t.isupper() for t in plain) and any(t.istitle() for t in plain)
    numbers = [t for t in a if any(c.isdigit() for c in t)]
    assert 0.2 < len(numbers) / len(a) < 0.3  # 25% numbers
    assert any(t.startswith("$") for t in numbers) and any(t.endswith("%") for t in numbers)
    assert any(t.count("/") == 2 for t in numbers) and any(":" in t for t in numbers)
    assert any(t.startswith("(") and t.endswith(")") for t in a)
    assert any("-" in t and t.replace("-", "").isalpha() for t in a)


def test_a_missing_dictionary_names_the_file_and_the_package(tmp_path):
    result = CliRunner().invoke(ocr_recipe.main, ["setup", "--dir", str(tmp_path / "p"),
                                                  "--dict", str(tmp_path / "none")])
    assert result.exit_code != 0
    assert "none is missing" in result.output and "wamerican" in result.output
    assert not (tmp_path / "p").exists()  # refused before anything is written


def test_ours_reads_the_lines_as_predict_does(tmp_path, ocr_project):
    """The bench's own reader on tools.ocr_testlines' lines: the run's model.onnx gives each
    line the text tools.predict writes for the same file, and the table counts every line."""
    root = tmp_path / "run"
    (root / "models").mkdir(parents=True)
    shutil.copy(ocr_project / "models/model.onnx", root / "models/model.onnx")
    fonts = tmp_path / "fonts"
    fonts.mkdir()
    for name in ("DejaVuSans.ttf", "DejaVuSerif.ttf"):
        shutil.copy(DEJAVU / name, fonts)
    (tmp_path / "words.txt").write_text("0123 4567 89 0 12 345\n")
    made = run_tool("ocr_testlines", "--fonts", fonts, "--words", tmp_path / "words.txt",
                    "--lines", "6", "--out", root / "data/plain")
    assert made.returncode == 0, made.stderr
    lines = ocr_recipe.test_lines(root)
    assert [Path(p).name for _, _, p, _ in lines] == [f"{i:05d}.png" for i in range(6)]
    assert [f for f, _, _, _ in lines] == ["DejaVuSans", "DejaVuSerif"] * 3
    texts, ms = ocr_recipe.ours(root, [p for _, _, p, _ in lines])
    assert ms > 0
    out = tmp_path / "predict.csv"
    done = run_tool("predict", *[str(p) for _, _, p, _ in lines], "--model",
                    root / "models/model.onnx", "--out", out)
    assert done.returncode == 0, done.stderr
    with out.open() as f:
        by_path = {Path(r["path"]).name: r["text"] for r in csv.DictReader(f)}
    assert texts == [by_path[Path(p).name] for _, _, p, _ in lines]
    # the run trained on DejaVuSans's lines only (its split and manifest): DejaVuSerif is unseen
    from stages.lib.io import write_csv

    write_csv(root / "data/split/train.csv", [{"path": "synth/a.png"}], ["path"])
    write_csv(root / "data/manifest.csv", [{"path": "synth/a.png", "group": "DejaVuSans"},
                                           {"path": "synth/b.png", "group": "DejaVuSerif"}],
              ["path", "group"])
    assert ocr_recipe.trained_fonts(root) == {"DejaVuSans"}
    result = CliRunner().invoke(ocr_recipe.main, ["peers", "--dir", str(root), "--json",
                                                  str(tmp_path / "peers.json")])
    assert result.exit_code == 0, result.output
    ours = json.loads((tmp_path / "peers.json").read_text())["ours"]
    assert ours["seen/all"]["lines"] == 3 == ours["unseen/all"]["lines"]
    assert sum(ours[f"{s}/{c}"]["lines"] for s in ("seen", "unseen")
               for c in ("tight", "medium", "loose") if f"{s}/{c}" in ours) == 6
    # the third renderer's lines, read the same way with --renderer agg
    made = run_tool("ocr_testlines", "--fonts", fonts, "--words", tmp_path / "words.txt",
                    "--lines", "4", "--out", root / "data/agg", "--renderer", "agg")
    assert made.returncode == 0, made.stderr
    agg = ocr_recipe.test_lines(root, "agg")
    assert [p.parent.parent.name for _, _, p, _ in agg] == ["agg"] * 4
    result = CliRunner().invoke(ocr_recipe.main, ["peers", "--dir", str(root), "--renderer",
                                                  "agg", "--json", str(tmp_path / "agg.json")])
    assert result.exit_code == 0, result.output
    ours = json.loads((tmp_path / "agg.json").read_text())["ours"]
    assert ours["seen/all"]["lines"] == 2 == ours["unseen/all"]["lines"]
