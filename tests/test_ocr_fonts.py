"""Issue 45: synthetic lines from font files (tools.synth_ocr), the stroke augmentations, the
larger reader, fonts held out by the split and CER per font. Fonts come from matplotlib's
bundled DejaVu set (matplotlib is pinned in requirements.lock), never from the system."""
import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import missing_tool, run_tool

FONTS = ("DejaVuSans", "DejaVuSerif", "DejaVuSansMono", "DejaVuSans-Oblique")
WORDS = "Invoice total 39.95 EUR paid Street 42 Berlin qty price 100% #7 Order due VAT the fox"
# sha256 of the first line (DejaVuSans-Oblique, the first font by name) at seed 0: the bytes
# Pillow 13.0.0 with its FreeType 2.14 and matplotlib 3.11.2's DejaVu write
FIRST_LINE = "ff6384c7e770d0c7684cff2fbe36eba1981431920ea75a52a1910fa2b6e1ac74"


def mpl_fonts() -> Path:
    import matplotlib

    return Path(matplotlib.__file__).parent / "mpl-data" / "fonts" / "ttf"


@pytest.fixture(scope="module")
def fonts(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fonts")
    for name in FONTS:
        shutil.copy(mpl_fonts() / f"{name}.ttf", folder / f"{name}.ttf")
    (folder.parent / "words.txt").write_text(WORDS + "\n", encoding="utf-8")
    return folder


def tree_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(folder).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def test_synth_is_deterministic_and_lists_the_font_of_every_line(fonts, tmp_path):
    words = fonts.parent / "words.txt"
    for out in ("a", "b"):
        proc = run_tool("synth_ocr", "--fonts", fonts, "--words", words, "--lines", "12",
                        "--out", tmp_path / out, "--holdout", "DejaVuSans-Oblique")
        assert proc.returncode == 0, proc.stderr
    assert tree_hash(tmp_path / "a") == tree_hash(tmp_path / "b")
    rows = [json.loads(line) for line in (tmp_path / "a" / "lines.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and len(list((tmp_path / "a" / "images").iterdir())) == 12
    assert [r["group"] for r in rows[:4]] == sorted(FONTS, key=lambda f: f + ".ttf")  # by file
    assert all(r["font"] == r["group"] for r in rows)
    assert {r["split"] for r in rows if r["group"] == "DejaVuSans-Oblique"} == {"test"}
    assert {r["split"] for r in rows if r["group"] != "DejaVuSans-Oblique"} == {"train"}
    assert all(set(r["text"]) <= set(WORDS) and r["text"] for r in rows)
    sums = {r["font_sha256"] for r in rows}
    assert len(sums) == 4
    from PIL import Image

    first = (tmp_path / "a" / rows[0]["path"])
    assert Image.open(first).size[1] == 32
    assert hashlib.sha256(first.read_bytes()).hexdigest() == FIRST_LINE
    # another seed draws other lines; the charset drops words outside it
    run_tool("synth_ocr", "--fonts", fonts, "--words", words, "--lines", "12", "--out",
             tmp_path / "c", "--seed", "1", "--charset", "abcdefghijklmnopqrstuvwxyz ")
    assert tree_hash(tmp_path / "c") != tree_hash(tmp_path / "a")
    texts = [json.loads(x)["text"] for x in (tmp_path / "c" / "lines.jsonl").read_text().split("\n")
             if x]
    assert all(set(t) <= set("abcdefghijklmnopqrstuvwxyz ") for t in texts)


def test_synth_names_bad_input(tmp_path, fonts):
    proc = run_tool("synth_ocr", "--fonts", tmp_path, "--words", fonts.parent / "words.txt",
                    "--lines", "2", "--out", tmp_path / "o")
    assert proc.returncode == 2 and "no font file" in proc.stderr
    proc = run_tool("synth_ocr", "--fonts", fonts, "--words", fonts.parent / "words.txt",
                    "--lines", "2", "--out", tmp_path / "o", "--holdout", "Comic")
    assert proc.returncode == 2 and "--holdout Comic: no such font" in proc.stderr


def test_a_font_without_a_glyph_the_words_need_is_named_before_any_line(tmp_path, fonts):
    """FreeType draws a .notdef box for a character the font lacks: the line's label would not
    match its pixels, so synth_ocr refuses, naming the font and the characters."""
    from fontTools import subset

    folder = tmp_path / "fonts"
    folder.mkdir()
    shutil.copy(fonts / "DejaVuSerif.ttf", folder / "DejaVuSerif.ttf")
    options = subset.Options()
    options.notdef_outline = True
    font = subset.load_font(str(fonts / "DejaVuSans.ttf"), options)
    sub = subset.Subsetter(options)
    sub.populate(text="".join(sorted(set(WORDS) - set("x%"))))
    sub.subset(font)
    subset.save_font(font, str(folder / "Cut.ttf"), options)
    out = tmp_path / "o"
    proc = run_tool("synth_ocr", "--fonts", folder, "--words", fonts.parent / "words.txt",
                    "--lines", "4", "--out", out)
    assert proc.returncode == 2, proc.stderr
    assert "Cut lacks '%' 'x'" in proc.stderr and "DejaVuSerif" not in proc.stderr
    assert not out.exists()
    proc = run_tool("synth_ocr", "--fonts", folder, "--words", fonts.parent / "words.txt",
                    "--lines", "4", "--out", out, "--charset",
                    "".join(sorted(set(WORDS) - set("x%"))))
    assert proc.returncode == 0, proc.stderr
    assert len((out / "lines.jsonl").read_text().splitlines()) == 4


def test_a_type1_font_is_checked_by_glyph_name():
    from stages.tasks.ocr.synth import missing_glyphs

    pfb = next(iter(sorted(Path("/usr/share/fonts").rglob("NimbusSans-Regular.pfb"))), None)
    if pfb is None:
        missing_tool("NimbusSans-Regular.pfb", "apt-get install fonts-urw-base35")
    assert missing_glyphs(pfb, "Az 9&#") == []
    assert missing_glyphs(pfb, "A\u0416") == ["\u0416"]  # no Cyrillic in Nimbus Sans


def test_real_lines_join_the_synthetic_ones(fonts, tmp_path):
    from stages.tasks.ocr.sample import text_lines

    for rel, data in text_lines(3):
        (tmp_path / "real" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "real" / rel).write_bytes(data)
    proc = run_tool("synth_ocr", "--fonts", fonts, "--words", fonts.parent / "words.txt",
                    "--lines", "4", "--out", tmp_path / "o", "--real", tmp_path / "real")
    assert proc.returncode == 0 and "and 3 of your own" in proc.stdout, proc.stderr
    rows = [json.loads(x) for x in (tmp_path / "o" / "lines.jsonl").read_text().splitlines()]
    real = [r for r in rows if r["group"] == "real"]
    assert [r["path"] for r in real] == [f"real/images/0000{i}.pgm" for i in range(3)]
    assert (tmp_path / "o" / real[0]["path"]).read_bytes() == \
        (tmp_path / "real" / "images" / "00000.pgm").read_bytes()
    truth = (tmp_path / "real" / "rec_gt.txt").read_text().splitlines()[0].split("\t")[1]
    assert real[0]["text"] == truth and len(rows) == 7


def test_held_out_fonts_never_reach_train(fonts, tmp_path):
    """Read as data.source (the JSONL layout's group and split keys), split.by given keeps the
    held-out font whole in test; split.by hash keeps each font whole in one split."""
    from stages.ingest import walk
    from stages.split import plan
    from stages.tasks.ocr import TASK
    from stages.tasks.ocr.synth import synthesize

    out = tmp_path / "s"
    synthesize(fonts, fonts.parent / "words.txt", 40, out, holdout=("DejaVuSerif",))
    found = TASK.read_annotations(out, walk(out), {})
    assert not found.errors
    rows = [{"path": rel, "sha256": rel, **v} for rel, v in sorted(found.values.items())]
    where, _ = plan(rows, 42, 0.15, 0.15, by="given")
    serif = {r["path"] for r in rows if r["group"] == "DejaVuSerif"}
    assert {where[p] for p in serif} == {"test"}
    assert not any(where[r["path"]] == "test" for r in rows if r["path"] not in serif)
    assert {where[p] for p in set(where) - serif} == {"train", "val"}
    where, keys = plan(rows, 42, 0.3, 0.3, by="hash")
    for name in FONTS:
        assert len({where[r["path"]] for r in rows if r["group"] == name}) == 1


def test_cer_per_font_and_seen_against_unseen(tmp_path):
    from stages.lib.io import csv_bytes, write_csv
    from stages.tasks.ocr.groups import group_metrics
    from stages.tasks.common.ctc import scores

    manifest = [{"path": f"l{i}.png", "group": g} for i, g in enumerate("AABBCC")]
    write_csv(tmp_path / "manifest.csv", manifest, ["path", "group"])
    write_csv(tmp_path / "train.csv", [{"path": "t.png"}, {"path": "l0.png"}], ["path"])
    preds = [{"path": f"l{i}.png", "truth": "abcd", "predicted": q}
             for i, q in enumerate(["abcd", "abcd", "abcd", "abcx", "xbcx", "abcd"])]
    # l0 is in train only to name A as seen; B has no line in train: unseen
    metrics, files = group_metrics(csv_bytes(preds, ["path", "truth", "predicted"]), scores,
                                   tmp_path / "manifest.csv", tmp_path / "train.csv")
    assert metrics["cer_seen_groups"] == 0.0 and metrics["lines_seen_groups"] == 2
    assert metrics["cer_unseen_groups"] == pytest.approx(3 / 16)
    table = files["per_group.csv"].decode().splitlines()
    assert table[0] == "group,seen,lines,characters,cer,line_accuracy"
    assert table[2] == "B,no,2,8,0.125000,0.500000" and table[3].startswith("C,no,2,8,0.25")
    # no group anywhere (the built-in sample): nothing added
    write_csv(tmp_path / "manifest.csv", [{**r, "group": ""} for r in manifest],
              ["path", "group"])
    assert group_metrics(csv_bytes(preds, ["path", "truth", "predicted"]), scores,
                         tmp_path / "manifest.csv", tmp_path / "train.csv") == ({}, {})


KNOBS = {"aug_stroke": 1.0, "aug_shear": 0.4, "aug_aspect": 0.4, "aug_elastic": 3.0,
         "aug_texture": 0.3, "aug_downscale": 0.6, "aug_jpeg": 1.0}


def line_tensor():
    import numpy as np
    import torch
    from PIL import Image, ImageDraw, ImageFont

    img = Image.new("L", (96, 32), 230)
    font = ImageFont.truetype(str(mpl_fonts() / "DejaVuSans.ttf"), 22,
                              layout_engine=ImageFont.Layout.BASIC)
    ImageDraw.Draw(img).text((4, 3), "Hamb 42", font=font, fill=20)
    return (torch.from_numpy(np.asarray(img, dtype=np.float32))[None] - 128) / 64


@pytest.mark.parametrize("knob", sorted(KNOBS))
def test_each_stroke_augmentation_changes_pixels_and_is_seeded(knob):
    import torch

    from stages.lib.params import Train
    from stages.tasks.ocr.augment import augment

    x = line_tensor()
    off = Train()
    on = dataclasses.replace(off, **{knob: KNOBS[knob]})
    assert torch.equal(augment(x.clone(), off, 7), x)  # every knob off: the line itself
    outs = [augment(x.clone(), on, s) for s in (7, 7, 8, 9, 10)]
    assert torch.equal(outs[0], outs[1])  # the same seed, the same pixels
    changed = [not torch.equal(o, x) for o in outs]
    assert sum(changed) >= 3, knob  # probabilities 1 or amplitudes drawn: most seeds change it
    assert len({o.numpy().tobytes() for o in outs[1:]}) >= 3  # seeds draw differently
    assert torch.isfinite(outs[0]).all()
    # switching this knob on leaves the older augmentations' draws where they were
    old = dataclasses.replace(off, aug_jitter=0.1)
    both = dataclasses.replace(old, **{knob: KNOBS[knob]})
    assert not torch.equal(augment(x.clone(), both, 7), augment(x.clone(), on, 7))


def test_stroke_width_thickens_or_thins_dark_ink():
    import torch

    from stages.lib.params import Train
    from stages.tasks.ocr import strokeaug

    x = line_tensor()
    p = dataclasses.replace(Train(), aug_stroke=1.0)
    dark = []
    for u1 in (0.2, 0.8):  # < 0.5: max filter (thins dark ink), else min filter (bolder)
        d = {"u": [0.0, u1, 1.0] + [0.0] * 9, "field": torch.zeros(2, 3, 9),
             "texture": torch.zeros(1, 4, 24)}
        dark.append(int((strokeaug.augment(x, p, d) < 0).sum()))
    assert dark[0] < int((x < 0).sum()) < dark[1]


def test_the_larger_reader_builds_and_reads_any_width():
    import torch

    from stages.tasks.ocr.model import build_model

    small, large = build_model("crnn", 88, 1, 32), build_model("crnn_large", 88, 1, 32)
    count = [sum(p.numel() for p in m.parameters()) for m in (small, large)]
    assert count == [424328, 1577528]
    large.eval()
    with torch.no_grad():
        assert large(torch.zeros(2, 1, 32, 96)).shape == (2, 24, 88)


def test_the_report_shows_cer_per_font_and_seen_against_unseen():
    from types import SimpleNamespace

    from stages.lib.io import csv_bytes, json_bytes
    from stages.report.tasks.ocr import evaluation

    table = [{"group": "DejaVuSerif", "seen": "no", "lines": 3, "characters": 30,
              "cer": "0.100000", "line_accuracy": "0.666667"}]
    files = {"per_class.json": json_bytes({"lower": 1.0}),
             "cer_distribution.csv": csv_bytes([], ["bin", "lines"]),
             "bad_cases.csv": csv_bytes([], ["path", "truth", "predicted", "cer", "confidence"]),
             "confusions.csv": csv_bytes([], ["truth", "predicted", "count"])}
    facts = SimpleNamespace(eval={"cer": 0.05, "cer_seen_groups": 0.01,
                                  "cer_unseen_groups": 0.1, "lines": 6}, eval_files=files)
    assert "CER per group" not in evaluation(facts)
    files["per_group.csv"] = csv_bytes(table, list(table[0]))
    html = evaluation(facts)
    assert 'data-key="per_group.DejaVuSerif.cer" data-value="0.1"' in html
    assert 'data-key="eval.cer_unseen_groups"' in html and "cer seen groups" in html
