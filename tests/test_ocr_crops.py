"""Issue 56: lines at every scale and crop. tools.synth_ocr's line box (--text-height,
--offset, --margin: a rendered line's hash pinned per style, the default style's bytes
unchanged) and the crop augmentation train.aug_crop_line, checked against a reference written
here (numpy bilinear sampling, not torch's grid_sample) on a few seeds. Fonts: matplotlib's
bundled DejaVu set, as tests/test_ocr_fonts.py."""
import hashlib
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.test_ocr_fonts import FIRST_LINE, FONTS, WORDS, mpl_fonts

# sha256 of line 0 (DejaVuSans-Oblique at seed 0) per style: Pillow 13.0.0 with its FreeType
# 2.14 and matplotlib 3.11.2's DejaVu
STYLES = {
    "default": ({}, FIRST_LINE),
    "tight": ({"text_height": (1.05, 1.05), "margin": (0.0, 0.0)},
              "bda6db7005b29eb46889f3fbabd1eb1846174d50a413884f36b3969f283244db"),
    "loose": ({"text_height": (0.5, 0.5), "offset": (0.1, 0.1), "margin": (0.8, 0.8)},
              "d465889d68e407cb6a9885f7bc960abc9b23633ea015fd6321b4cdf32204f4fe"),
    "ranges": ({"text_height": (0.55, 1.1), "offset": (-0.08, 0.08), "margin": (0.0, 0.6)},
               "b022a9f258ec3da4b386979fd3e85b71e32253bae24ceb9c45e0c193727bfe34"),
}


@pytest.fixture(scope="module")
def fonts(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fonts")
    for name in FONTS:
        shutil.copy(mpl_fonts() / f"{name}.ttf", folder / f"{name}.ttf")
    return folder


def first_line(fonts, style_kw, seed=0, i=0):
    from stages.tasks.ocr.synth import Style, draw_line, find_fonts, png_bytes

    font = find_fonts(fonts)[i % len(FONTS)]
    text, pixels, draws = draw_line(font, WORDS.split(), Style(**style_kw), seed, i, 2.0)
    return text, pixels, draws, hashlib.sha256(png_bytes(pixels)).hexdigest()


@pytest.mark.parametrize("name", sorted(STYLES))
def test_a_rendered_line_keeps_its_bytes_per_style(fonts, name):
    style_kw, pinned = STYLES[name]
    text, pixels, draws, digest = first_line(fonts, style_kw)
    assert first_line(fonts, style_kw)[3] == digest  # the same call, the same bytes
    assert digest == pinned, (name, digest)
    assert pixels.shape[0] == 32
    if name == "default":  # no line-box draw: no key of it in the list
        assert "crop" not in draws and "text_height" not in draws
    else:
        lo, hi = style_kw["text_height"]
        assert lo <= draws["text_height"] <= hi
        assert draws["crop"] in ("loose", "medium", "tight")


def ink_rows(pixels) -> float:
    """The share of rows holding ink darker than the mid grey of the line."""
    p = pixels.astype(float)
    mid = (p.max() + p.min()) / 2
    return float(((p < mid).any(axis=1)).mean())


def test_tight_lines_fill_the_height_and_loose_ones_leave_paper(fonts):
    tight = [first_line(fonts, STYLES["tight"][0], i=i)[1] for i in range(4)]
    loose = [first_line(fonts, STYLES["loose"][0], i=i)[1] for i in range(4)]
    assert min(ink_rows(t) for t in tight) > 0.75
    assert max(ink_rows(x) for x in loose) < 0.6


def test_a_line_box_option_without_text_height_is_refused(fonts, tmp_path):
    from stages.tasks.ocr.synth import Style, check_style

    with pytest.raises(ValueError, match="--text-height"):
        check_style(Style(margin=(0.0, 0.5)))
    with pytest.raises(ValueError, match="--text-height 1.2 0.5"):
        check_style(Style(text_height=(1.2, 0.5)))
    with pytest.raises(ValueError, match="--offset"):
        check_style(Style(text_height=(0.6, 0.9), offset=(-0.9, 0.0)))


# --- train.aug_crop_line against a reference ---------------------------------------------

def reference_crop(x: np.ndarray, a: float, u) -> np.ndarray:
    """The crop of the line box as docs/ocr.md states it, pixel by pixel with numpy: zoom
    z = (1 + a) ** (2 u0 - 1) about the middle row, shift (2 u1 - 1) * a / 10 of the height,
    anchored at the left edge with z_x = min(z, W / text width), paper outside."""
    c, h, w = x.shape
    pad_cols = 0
    while pad_cols < w and np.all(x[:, :, w - 1 - pad_cols] == x[0, 0, -1]):
        pad_cols += 1
    if pad_cols:
        fill, width = x[0, 0, -1], max(w - pad_cols, 1)
    else:
        border = np.sort(np.concatenate([x[:, 0, :].ravel(), x[:, -1, :].ravel(),
                                         x[:, :, 0].ravel(), x[:, :, -1].ravel()]))
        fill = border[(len(border) - 1) // 2]  # the lower middle value
        width = w
    z = (1 + a) ** (2 * u[0] - 1)
    zx = min(z, w / width)
    shift = (2 * u[1] - 1) * a / 10
    out = np.empty_like(x)
    for i in range(h):
        yn = ((2 * i + 1) / h - 1) / z + 2 * shift  # normalised, align_corners=False
        yp = ((yn + 1) * h - 1) / 2
        for j in range(w):
            xn = ((2 * j + 1) / w - 1 + 1) / zx - 1
            xp = ((xn + 1) * w - 1) / 2
            y0, x0 = math.floor(yp), math.floor(xp)
            acc = np.zeros(c)
            for dy, wy in ((0, 1 - (yp - y0)), (1, yp - y0)):
                for dx, wx in ((0, 1 - (xp - x0)), (1, xp - x0)):
                    yy, xx = y0 + dy, x0 + dx
                    if 0 <= yy < h and 0 <= xx < w:
                        acc += wy * wx * (x[:, yy, xx] - fill)
            out[:, i, j] = acc + fill
    return out


def a_line(seed: int, padded: bool) -> np.ndarray:
    """A 1 x 16 x 40 line: paper with dark strokes, right-padded with one grey when padded."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.6, 1.0, (1, 16, 40)).astype(np.float32)
    x[:, 4:12, 3:30:3] = rng.uniform(-1.0, -0.5, (1, 8, 9))
    if padded:
        x[:, :, 31:] = np.float32(0.8)
    return x


@pytest.mark.parametrize("seed", [0, 1, 7, 123456789])
def test_the_line_box_crop_matches_the_reference(seed):
    import torch

    from stages.tasks.ocr import cropaug

    for padded in (True, False):
        x = a_line(seed, padded)
        u = torch.rand(2, generator=torch.Generator().manual_seed(seed)).tolist()
        for a in (0.3, 0.8):
            got = cropaug.augment(torch.from_numpy(x), a, u).numpy()
            assert np.allclose(got, reference_crop(x.astype(np.float64), a, u), atol=1e-5)


def ocr_params(**kw):
    import dataclasses

    from stages.lib.params import Train

    return dataclasses.replace(Train(), **kw)


def test_the_crop_augmentation_is_seeded_per_sample_and_off_changes_nothing():
    import torch

    from stages.lib.train.augment import sample_seed
    from stages.tasks.ocr import cropaug, strokeaug
    from stages.tasks.ocr.augment import augment, augment_batch

    x = torch.from_numpy(a_line(3, True))
    base = ocr_params(aug_rotate=1.5, aug_stretch=0.15, aug_blur=0.3, aug_jitter=0.1)
    on = ocr_params(aug_rotate=1.5, aug_stretch=0.15, aug_blur=0.3, aug_jitter=0.1,
                    aug_crop_line=0.8)
    seeds = [sample_seed(0, e, i) for e in range(2) for i in range(3)]
    assert torch.equal(augment(x.clone(), ocr_params(), seeds[0]), x)  # every knob off
    for s in seeds:
        assert torch.equal(augment(x, on, s), augment(x, on, s))  # determinism across calls
    # the knob at 0: the older augmentation's pixels, bit for bit; on: other pixels
    before = [augment(x, base, s) for s in seeds]
    after = [augment(x, on, s) for s in seeds]
    assert not any(torch.equal(b, a) for b, a in zip(before, after, strict=True))
    assert len({a.sum().item() for a in after}) == len(seeds)  # each sample its own draws
    # the crop alone is the reference's with the draws taken after every other draw
    alone = ocr_params(aug_crop_line=0.8)
    for s in seeds[:3]:
        g = torch.Generator().manual_seed(s)
        torch.rand(8, generator=g)
        torch.randn(x.shape, generator=g)
        strokeaug.draws(g, x.shape)
        u = cropaug.draws(g)
        want = reference_crop(x.numpy().astype(np.float64), 0.8, u)
        assert np.allclose(augment(x, alone, s).numpy(), want, atol=1e-5)
    # the batched path gives the same lines
    batch = augment_batch(torch.stack([x, x, x]), on, seeds[:3])
    for i, s in enumerate(seeds[:3]):
        assert torch.equal(batch[i], augment(x, on, s))


# --- the held-out renderer ---------------------------------------------------------------

def test_the_second_renderer_writes_a_paddle_list_that_synth_ocr_holds_out(fonts, tmp_path):
    import json

    from tests.conftest import run_tool

    words = tmp_path / "words.txt"
    words.write_text(WORDS + "\n", encoding="utf-8")
    for out in ("p", "q"):
        proc = run_tool("ocr_testlines", "--fonts", fonts, "--words", words, "--lines", "21",
                        "--out", tmp_path / out)
        assert proc.returncode == 0, proc.stderr
    listing = (tmp_path / "p" / "rec_gt.txt").read_text(encoding="utf-8").splitlines()
    assert len(listing) == 21 and all("\t" in x for x in listing)
    for rel in [x.split("\t")[0] for x in listing]:  # the same bytes on a second run
        assert (tmp_path / "p" / rel).read_bytes() == (tmp_path / "q" / rel).read_bytes()
    facts = [json.loads(x) for x in (tmp_path / "p" / ".lines.jsonl").read_text().splitlines()]
    assert [f["crop"] for f in facts[:21:7]] == ["tight", "medium", "loose"]
    proc = run_tool("synth_ocr", "--fonts", fonts, "--words", words, "--lines", "8", "--out",
                    tmp_path / "d", "--test-set", tmp_path / "p", "--holdout", "DejaVuSerif")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in (tmp_path / "d" / "lines.jsonl").read_text().splitlines()]
    held = [r for r in rows if r["path"].startswith("p/")]
    assert len(held) == 21 and {r["split"] for r in held} == {"test"}
    assert held[0]["group"] == f"renderer=p;font={facts[0]['font']};crop=tight"
    assert all((tmp_path / "d" / r["path"]).read_bytes() == (tmp_path / "p" / r["path"][2:])
               .read_bytes() for r in held)
    assert {r["split"] for r in rows if r["group"] == "DejaVuSans"} == {"train"}
    # a folder it did not write is left alone
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("x")
    proc = run_tool("ocr_testlines", "--fonts", fonts, "--words", words, "--lines", "2",
                    "--out", tmp_path / "mine")
    assert proc.returncode == 2 and "not written by ocr_testlines" in proc.stderr
    assert (tmp_path / "mine" / "keep.txt").read_text() == "x"
    # a line-box option without --text-height: refused before anything is written
    proc = run_tool("synth_ocr", "--fonts", fonts, "--words", words, "--lines", "2", "--out",
                    tmp_path / "e", "--margin", "0", "0.5")
    assert proc.returncode == 2 and "--text-height" in proc.stderr
    assert not (tmp_path / "e").exists()


def test_evaluate_scores_the_held_out_renderer_per_font_and_crop(tmp_path):
    from stages.lib.io import csv_bytes, write_csv
    from stages.tasks.common.ctc import scores
    from stages.tasks.ocr.groups import group_metrics

    groups = ["A", "B", "renderer=r;font=A;crop=tight", "renderer=r;font=A;crop=loose",
              "renderer=r;font=B;crop=tight", "renderer=r;font=B;crop=loose"]
    write_csv(tmp_path / "manifest.csv", [{"path": f"l{i}.png", "group": g}
                                          for i, g in enumerate(groups)], ["path", "group"])
    write_csv(tmp_path / "train.csv", [{"path": "l0.png"}], ["path"])  # A seen, B not
    preds = [{"path": f"l{i}.png", "truth": "abcd", "predicted": q}
             for i, q in enumerate(["abcd", "abcx", "abcd", "abxx", "xxxx", "abcd"])]
    metrics, files = group_metrics(csv_bytes(preds, ["path", "truth", "predicted"]), scores,
                                   tmp_path / "manifest.csv", tmp_path / "train.csv")
    # the training renderer's figures hold only its own lines
    assert metrics["lines_seen_groups"] == 1 and metrics["cer_unseen_groups"] == 0.25
    assert metrics["cer_held_out_renderer"] == pytest.approx(6 / 16)
    assert metrics["lines_held_out_renderer"] == 4
    assert metrics["cer_held_out_renderer_seen_fonts"] == pytest.approx(2 / 8)
    assert metrics["cer_held_out_renderer_unseen_fonts"] == pytest.approx(4 / 8)
    assert metrics["cer_held_out_renderer_crop_tight"] == pytest.approx(4 / 8)
    assert metrics["cer_held_out_renderer_crop_loose"] == pytest.approx(2 / 8)
    table = files["per_renderer.csv"].decode().splitlines()
    assert table[0] == "renderer,by,value,seen,lines,characters,cer,line_accuracy"
    assert "r,font,B,no,2,8,0.500000,0.500000" in table
    assert "r,fonts seen,yes,yes,2,8,0.250000,0.500000" in table
    assert files["per_group.csv"].decode().count("\n") == 3  # header, A, B
    # two held-out renderers: each one's CER in eval.json, the breakdowns in the table only
    groups[4:] = ["renderer=Agg-2;font=B;crop=tight", "renderer=Agg-2;font=B;crop=loose"]
    write_csv(tmp_path / "manifest.csv", [{"path": f"l{i}.png", "group": g}
                                          for i, g in enumerate(groups)], ["path", "group"])
    metrics, files = group_metrics(csv_bytes(preds, ["path", "truth", "predicted"]), scores,
                                   tmp_path / "manifest.csv", tmp_path / "train.csv")
    assert metrics["cer_held_out_renderer"] == pytest.approx(6 / 16)
    assert metrics["cer_held_out_renderer_r"] == pytest.approx(2 / 8)
    assert metrics["cer_held_out_renderer_agg_2"] == pytest.approx(4 / 8)
    assert metrics["lines_held_out_renderer_agg_2"] == 2
    assert "cer_held_out_renderer_crop_tight" not in metrics
    assert "Agg-2,font,B,no,2,8,0.500000,0.500000" in files["per_renderer.csv"].decode()
    # without held-out renderer lines: nothing of it
    only = [r for r in preds if r["path"] in ("l0.png", "l1.png")]
    metrics, files = group_metrics(csv_bytes(only, ["path", "truth", "predicted"]), scores,
                                   tmp_path / "manifest.csv", tmp_path / "train.csv")
    assert "per_renderer.csv" not in files and "cer_held_out_renderer" not in metrics


def test_the_report_shows_the_held_out_renderer():
    from types import SimpleNamespace

    from stages.lib.io import csv_bytes, json_bytes
    from stages.report.tasks.ocr import evaluation
    from stages.tasks.ocr.groups import RENDERER_FIELDS

    files = {"per_class.json": json_bytes({"lower": 1.0}),
             "cer_distribution.csv": csv_bytes([], ["bin", "lines"]),
             "bad_cases.csv": csv_bytes([], ["path", "truth", "predicted", "cer", "confidence"]),
             "confusions.csv": csv_bytes([], ["truth", "predicted", "count"])}
    facts = SimpleNamespace(eval={"cer": 0.05, "cer_held_out_renderer": 0.2}, eval_files=files)
    assert "Held-out renderer" not in evaluation(facts)
    row = {"renderer": "plain", "by": "crop", "value": "tight", "seen": "", "lines": 3,
           "characters": 30, "cer": "0.200000", "line_accuracy": "0.5"}
    files["per_renderer.csv"] = csv_bytes([row], RENDERER_FIELDS)
    html = evaluation(facts)
    assert "Held-out renderer" in html
    assert 'data-key="per_renderer.plain.tight.cer" data-value="0.2"' in html


def test_each_line_knob_alone_switches_augmentation_on():
    """Every OCR line knob set on its own makes train augment (stroke, shear, ..., the crop,
    and a zoom-out), not only when a photo knob is on beside it."""
    from stages.lib.params import Train
    from stages.lib.train.augment import augmenting

    assert not augmenting(Train())
    for key in ("aug_stretch", "aug_blur", "aug_stroke", "aug_shear", "aug_aspect",
                "aug_elastic", "aug_texture", "aug_downscale", "aug_jpeg", "aug_crop_line",
                "aug_gradient", "aug_specks"):
        assert augmenting(Train(**{key: 0.01})), key
    assert augmenting(Train(aug_zoom_out=1.5))


def test_the_third_renderer_writes_its_own_lines_the_same_twice(fonts, tmp_path):
    """tools.ocr_testlines --renderer agg: the same bytes on a second run, lines that differ
    from the second renderer's of the same text, crops in turn with the drawn ink share (tight
    ink filling more of the height than loose), grey JPEG lines of the line height, and its
    name in each line's facts."""
    import json

    from PIL import Image

    from tests.conftest import run_tool

    words = tmp_path / "words.txt"
    words.write_text(WORDS + "\n", encoding="utf-8")
    for out, renderer in (("a", "agg"), ("b", "agg"), ("p", "plain")):
        proc = run_tool("ocr_testlines", "--fonts", fonts, "--words", words, "--lines", "21",
                        "--out", tmp_path / out, "--renderer", renderer)
        assert proc.returncode == 0, proc.stderr
    listing = (tmp_path / "a" / "rec_gt.txt").read_text(encoding="utf-8").splitlines()
    plain = (tmp_path / "p" / "rec_gt.txt").read_text(encoding="utf-8").splitlines()
    assert len(listing) == 21 and listing == plain  # the same texts: the words draw first
    facts = [json.loads(x) for x in (tmp_path / "a" / ".lines.jsonl").read_text().splitlines()]
    assert {f["renderer"] for f in facts} == {"agg"}
    assert [f["crop"] for f in facts[:21:7]] == ["tight", "medium", "loose"]
    ink = {"tight": [], "loose": []}
    for rel, f in zip([x.split("\t")[0] for x in listing], facts, strict=True):
        a, b = (tmp_path / "a" / rel).read_bytes(), (tmp_path / "b" / rel).read_bytes()
        assert a == b and a != (tmp_path / "p" / rel).read_bytes()
        px = np.asarray(Image.open(tmp_path / "a" / rel))
        assert px.ndim == 2 and px.shape[0] == 32 and px.shape[1] > 8
        if f["crop"] in ink:
            dark = px < (int(px.max()) + int(px.min())) / 2
            rows = np.nonzero(dark.any(axis=1))[0]
            ink[f["crop"]].append((rows[-1] - rows[0] + 1) / 32)
    assert min(ink["tight"]) > max(ink["loose"])
    proc = run_tool("ocr_testlines", "--fonts", fonts, "--words", words, "--lines", "2",
                    "--out", tmp_path / "c", "--renderer", "nope")
    assert proc.returncode == 2 and "nope" in proc.stderr
    # both renderers as held-out test sets of one synth_ocr folder, each under its own name
    proc = run_tool("synth_ocr", "--fonts", fonts, "--words", words, "--lines", "4", "--out",
                    tmp_path / "d", "--test-set", tmp_path / "p", "--test-set", tmp_path / "a")
    assert proc.returncode == 0, proc.stderr
    assert "21 test lines of a and 21 test lines of p" in proc.stdout
    rows = [json.loads(x) for x in (tmp_path / "d" / "lines.jsonl").read_text().splitlines()]
    for name in ("p", "a"):
        held = [r for r in rows if r["path"].startswith(f"{name}/")]
        assert len(held) == 21 and {r["split"] for r in held} == {"test"}
        assert held[0]["group"].startswith(f"renderer={name};font=")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "a").symlink_to(tmp_path / "a")
    proc = run_tool("synth_ocr", "--fonts", fonts, "--words", words, "--lines", "4", "--out",
                    tmp_path / "e", "--test-set", tmp_path / "a", "--test-set", tmp_path / "b")
    assert proc.returncode == 0, proc.stderr  # a and b: two names
    proc = run_tool("synth_ocr", "--fonts", fonts, "--words", words, "--lines", "4", "--out",
                    tmp_path / "f", "--test-set", tmp_path / "a", "--test-set",
                    tmp_path / "x" / "a")
    assert proc.returncode == 2 and "names must differ" in proc.stderr
    assert not (tmp_path / "f").exists()
