"""Issue 41, items 2, 6, 7, 8 and 11 (first two): what the data gate must name about labels.

COCO `iscrowd`, `area` and `segmentation` of the wrong type; a data.yaml whose `names` has keys
that are not class ids, or 100,000 names of which 2 are used; classification's annotation
errors each with its own reason; control and format characters inside OCR transcripts, and a
100,000-character one printed short; a byte-order mark in labels.csv or rec_gt.txt; a pixel
refusal naming --max-pixels, not Pillow's limit. Real files, real stage runs.
"""
import csv
import json

from tests.conftest import run_stage, write_image
from tests.test_gate_hardening import box, coco, manifest, one_line_error, params, snapshot


def report_text(tmp) -> str:
    return (tmp / "reports/validation.html").read_text(encoding="utf-8")


# --- 2. COCO iscrowd, area and segmentation --------------------------------------------------

BAD_ANNOTATIONS = {  # image name -> (the annotation's extra fields, the reason validate gives)
    "crowd_text": ({"iscrowd": "0"}, "iscrowd is '0' (a string), not 0 or 1"),
    "crowd_nan": ({"iscrowd": "@NaN@"}, "iscrowd is NaN, not 0 or 1"),
    "crowd_two": ({"iscrowd": 2}, "iscrowd is 2, not 0 or 1"),
    "crowd_true": ({"iscrowd": True}, "iscrowd is true, not 0 or 1"),
    "crowd_null": ({"iscrowd": None}, "iscrowd is null, not 0 or 1"),
    "area_negative": ({"area": -4}, "area is -4, not 0 or above"),
    "area_text": ({"area": "200"}, "area is '200' (a string), not a number"),
    "area_inf": ({"area": "@Infinity@"}, "area is Infinity, not a finite number"),
    "seg_text": ({"segmentation": "poly"}, "segmentation is 'poly' (a string), not polygons"),
    "seg_odd": ({"segmentation": [[1, 2, 3]]}, "segmentation[0] is [1, 2, 3], not a polygon"),
    "seg_nan": ({"segmentation": [[1, 2, "@NaN@", 4, 5, 6]]},
                "segmentation[0][2] is NaN, not a finite number"),
    "rle_counts": ({"segmentation": {"counts": 7, "size": [40, 80]}},
                   "segmentation counts is 7, not an RLE"),
}


def test_coco_iscrowd_area_and_segmentation_are_checked(in_tmp):
    """`"iscrowd": "0"` or NaN used to drop the image's boxes without a word ("50 of 50 files
    usable" and one no_labels warning): now every bad iscrowd, area and segmentation blocks
    its image as malformed_box, naming the annotation; valid ones (a crowd RLE, polygons, an
    area, a null area or segmentation) pass."""
    source = in_tmp / "coco"
    good = {"good": {}, "crowd_rle": {}, "nulls": {"area": None, "segmentation": None}}
    names = [*good, *BAD_ANNOTATIONS]
    images, anns = [], []
    for k, name in enumerate(names):
        write_image(source / f"images/train/{name}.png", (80, 40), "RGB", seed=k)
        images.append({"id": k, "file_name": f"{name}.png", "width": 80, "height": 40})
        ann = {**box(100 + k, k, [10, 10, 20, 10]), "area": 200.0,
               "segmentation": [[10, 10, 30, 10, 30, 20, 10, 20]]}
        ann.update(good[name] if name in good else BAD_ANNOTATIONS[name][0])
        anns.append(ann)
    anns.append({**box(99, 1, [0, 0, 80, 40]), "iscrowd": 1,  # a crowd region: left out
                 "segmentation": {"counts": "PPYo1", "size": [40, 80]}, "area": 3200})
    text = json.dumps({"images": images, "annotations": anns,
                       "categories": [{"id": 1, "name": "ring"}]})
    coco(source, [], [], text=text.replace('"@NaN@"', "NaN").replace('"@Infinity@"',
                                                                     "Infinity"))
    before = snapshot(source)
    params(in_tmp, source)
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    assert len(json.loads(manifest(in_tmp)["images/train/crowd_rle.png"]["boxes"])) == 1
    proc = run_stage("validate", cwd=in_tmp)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    for k, (name, (_, why)) in enumerate(BAD_ANNOTATIONS.items(), len(good)):
        assert (f"[malformed_box] images/train/{name}.png: annotation {100 + k}: malformed "
                f"row: {why}") in proc.stderr, (name, proc.stderr)
    for name in good:
        assert f"{name}.png" not in proc.stderr
    assert "no_labels" not in proc.stdout  # no box vanished
    counts = json.loads((in_tmp / "metrics/validation_checks.json").read_text())
    assert counts["malformed_box"] == len(BAD_ANNOTATIONS) and counts["no_labels"] == 0
    assert snapshot(source) == before


# --- 6. data.yaml's names ----------------------------------------------------------------------

def yolo(source, names_yaml: str, used=(0, 1), images=3):
    (source / "labels/train").mkdir(parents=True, exist_ok=True)
    (source / "data.yaml").write_text(names_yaml)
    for k in range(images):
        write_image(source / f"images/train/{k}.png", (64, 64), "RGB", seed=k)
        (source / f"labels/train/{k}.txt").write_text(
            "".join(f"{c} 0.5 0.5 0.3 0.3\n" for c in used))


def test_data_yaml_names_with_keys_that_are_not_ids_is_one_line(in_tmp):
    """`names: {a: red}` used to be a raw ValueError traceback from read_names."""
    source = in_tmp / "yolo"
    yolo(source, "names: {a: red, b: green}\n")
    params(in_tmp, source)
    error = one_line_error(run_stage("ingest", cwd=in_tmp))
    assert "data.yaml" in error and "`names` key 'a' (a string) is not a class id" in error
    assert "names: {0: red, 1: green}" in error and "names: [red, green]" in error
    for text, says in (("names: {0: red, 0.5: green}\n", "key 0.5 is not a class id"),
                       ("names: {0: red, '0': green}\n", "class id 0 twice"),
                       ("names: {-1: red}\n", "key -1 is negative"),
                       ("names: [red, [green]]\n", 'names[1] is ["green"], not a class name'),
                       ("nc: 2\n", "it is null")):
        (source / "data.yaml").write_text(text)
        error = one_line_error(run_stage("ingest", cwd=in_tmp))
        assert "data.yaml" in error and says in error, (text, error)
    (source / "data.yaml").write_text("names: {0: red, '1': green}\n")  # a quoted id is one
    proc = run_stage("ingest", cwd=in_tmp)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(manifest(in_tmp)["images/train/0.png"]["boxes"])[1][1] == "green"


def test_many_unused_names_are_a_named_warning(in_tmp):
    """100,000 names of which 2 are used passed without a word."""
    source = in_tmp / "yolo"
    yolo(source, "names: [" + ", ".join(f"c{k}" for k in range(100_000)) + "]\n", used=(3, 7))
    params(in_tmp, source)
    proc = run_stage("ingest", cwd=in_tmp)
    assert proc.returncode == 0, proc.stderr
    [line] = [ln for ln in proc.stderr.splitlines() if "unused_classes" in ln]
    assert line.startswith("ingest: warning: unused_classes: data.yaml names 100000 classes, "
                           "2 of them (0.002%) used by a box; 99998 have none: c0, c1, c2, "
                           "c4, c5 and 99993 more."), line
    assert len(line) < 300
    (source / "data.yaml").write_text("names: [c0, c1]\n")  # every name used: no warning
    for k in range(3):
        (source / f"labels/train/{k}.txt").write_text("0 0.5 0.5 0.3 0.3\n1 0.2 0.2 0.1 0.1\n")
    proc = run_stage("ingest", cwd=in_tmp)
    assert proc.returncode == 0 and "unused_classes" not in proc.stderr, proc.stderr


# --- 7. classification: each annotation error with its own reason -------------------------

def test_classification_annotation_errors_give_their_own_reason(in_tmp):
    """Missing, unlabelled and empty-folder rows all printed "unexpected class X
    (validate.classes)": `[missing] cat/../dog/0.png: unexpected class owl`."""
    source = in_tmp / "listed"
    for k in range(3):
        write_image(source / f"cat/{k}.png", seed=k)
    write_image(source / "stray.png", seed=9)
    (source / "labels.csv").write_text("path,label\ncat/0.png,cat\ncat/1.png,cat\n"
                                       "cat/2.png,cat\ncat/../dog/0.png,owl\n")
    params(in_tmp, source, task="classification")
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    proc = run_stage("validate", cwd=in_tmp)
    assert proc.returncode == 1
    assert ("[missing] cat/../dog/0.png: missing: listed in labels.csv but not found under "
            "data.source") in proc.stderr, proc.stderr
    assert "[unlabelled] stray.png: unlabelled: no label in labels.csv" in proc.stderr
    assert "unexpected class" not in proc.stderr

    folders = in_tmp / "folders"
    for k in range(3):
        write_image(folders / f"cat/{k}.png", seed=k)
    (folders / "owl").mkdir()
    write_image(folders / "stray.png", seed=9)
    params(in_tmp, folders, task="classification", classes=["cat", "dog"])
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    proc = run_stage("validate", cwd=in_tmp)
    assert proc.returncode == 1
    assert ("[empty_folder] owl/: empty class folder: it holds no files; remove it or add "
            "images") in proc.stderr, proc.stderr
    assert ("[unlabelled] stray.png: unlabelled: not inside a class folder; move it to "
            "<source>/<class>/") in proc.stderr
    assert "unexpected class" not in proc.stderr
    write_image(folders / "owl/0.png", seed=5)  # the check of its own still says its own
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    proc = run_stage("validate", cwd=in_tmp)
    assert "[unexpected_class] owl/0.png: unexpected class owl (validate.classes)" in proc.stderr


# --- 8. control and format characters in OCR transcripts -----------------------------------

HIDDEN = {"nul": "he\x00llo", "esc": "a\x1b[2Jb", "rlo": "ab\u202ecd", "lsep": "li\u2028ne",
          "vt": "v\x0bt", "del": "de\x7fl"}


def ocr_tree(source, lines: dict):
    rows = []
    for k, (name, text) in enumerate(lines.items()):
        write_image(source / f"{name}.png", size=(60, 32), seed=k)
        rows.append(f"{name}.png\t{text}")
    (source / "rec_gt.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")


def test_control_characters_amid_text_are_named_and_block_under_a_charset(in_tmp):
    """NUL, ESC, U+202E, U+2028, VT and DEL among visible text passed: only all-invisible
    transcripts were flagged."""
    source = in_tmp / "lines"
    ocr_tree(source, {"ok": "hello", **HIDDEN})
    params(in_tmp, source, task="ocr")
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    proc = run_stage("validate", cwd=in_tmp)
    assert proc.returncode == 0, proc.stderr
    [warning] = [ln for ln in proc.stdout.splitlines() if "invisible_text" in ln]
    assert warning.startswith("validate: warning: 6 files: invisible_text: del.png, esc.png")
    assert "\x1b" not in proc.stdout + proc.stderr
    counts = json.loads((in_tmp / "metrics/validation_checks.json").read_text())
    assert counts["invisible_text"] == len(HIDDEN)
    page = report_text(in_tmp)
    for code in ("U+0000", "U+001B", "U+202E", "U+2028", "U+000B", "U+007F"):
        assert f"holds 1 control, format or separator character(s) ({code}) among its " \
               f"text" in page, code
    assert "ok.png" not in warning

    params(in_tmp, source, task="ocr", charset="abcdehilnortv[]2J")
    proc = run_stage("validate", cwd=in_tmp)
    assert proc.returncode == 1
    for name in HIDDEN:
        assert f"[unknown_char] {name}.png: characters outside validate.charset" in \
               proc.stderr, (name, proc.stderr)
    assert "ok.png" not in proc.stderr


def test_a_huge_transcript_is_quoted_short(in_tmp):
    """too_long printed the whole 100,000-character transcript."""
    source = in_tmp / "lines"
    ocr_tree(source, {"ok": "hello", "huge": "ab" * 50_000})
    params(in_tmp, source, task="ocr")
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    proc = run_stage("validate", cwd=in_tmp)
    assert proc.returncode == 1
    [line] = [ln for ln in proc.stderr.splitlines() if "[too_long]" in ln]
    assert line.startswith("  [too_long] huge.png: transcript '" + "ab" * 30 + "'… (100000 "
                           "chars) needs 100000 CTC frames"), line
    assert len(line) < 400
    with open(in_tmp / "data/quarantine.csv", newline="") as f:
        assert list(csv.DictReader(f)) == []  # on_error fail: nothing quarantined


# --- 11. a byte-order mark; a pixel refusal naming our limit ---------------------------------

BOM = "\ufeff"


def test_a_bom_in_labels_csv_is_dropped_and_utf16_is_named(in_tmp):
    """labels.csv saved by Excel ("CSV UTF-8") starts with U+FEFF: its header read
    `\\ufeffpath`, and ingest said it needed a header with `path,label`, never naming the BOM."""
    source = in_tmp / "listed"
    for k in range(2):
        write_image(source / f"img/{k}.png", seed=k)
    text = "path,label\r\nimg/0.png,cat\r\nimg/1.png,dog\r\n"
    (source / "labels.csv").write_bytes((BOM + text).encode())
    params(in_tmp, source, task="classification")
    proc = run_stage("ingest", cwd=in_tmp)
    assert proc.returncode == 0, proc.stderr
    rows = manifest(in_tmp)
    assert rows["img/0.png"]["label"] == "cat" and rows["img/1.png"]["label"] == "dog"
    assert not rows["img/0.png"]["error"]

    (source / "labels.csv").write_bytes((BOM + BOM + text).encode())  # saved twice with one
    error = one_line_error(run_stage("ingest", cwd=in_tmp))
    assert "labels.csv" in error and "its header holds U+FEFF (a byte-order mark" in error
    (source / "labels.csv").write_bytes((text + BOM + "img/2.png,eel\r\n").encode())  # joined
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    assert "its path holds U+FEFF (a byte-order mark" in manifest(in_tmp)["\ufeffimg/2.png"][
        "error"]
    (source / "labels.csv").write_bytes(text.encode("utf-16"))
    error = one_line_error(run_stage("ingest", cwd=in_tmp))
    assert "labels.csv: it is UTF-16 text (it starts with the byte-order mark FF FE); save " \
           "it as UTF-8" in error, error


def test_a_bom_in_rec_gt_and_transcripts_is_dropped_and_utf16_is_named(in_tmp):
    """rec_gt.txt from Notepad starts with U+FEFF: its first path was `\\ufeffa.png`, missing,
    and a.png unlabelled, with the BOM named nowhere."""
    source = in_tmp / "lines"
    for k, name in enumerate("ab"):
        write_image(source / f"{name}.png", size=(60, 32), seed=k)
    (source / "rec_gt.txt").write_bytes((BOM + "a.png\thello\r\nb.png\tworld\r\n").encode())
    params(in_tmp, source, task="ocr")
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    rows = manifest(in_tmp)
    assert set(rows) == {"a.png", "b.png"}
    assert rows["a.png"]["text"] == "hello" and not rows["a.png"]["error"]
    assert run_stage("validate", cwd=in_tmp).returncode == 0

    (source / "rec_gt.txt").write_bytes("a.png\thello\nb.png\tworld\n".encode("utf-16"))
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    assert manifest(in_tmp)["rec_gt.txt"]["error"] == (
        "rec_gt.txt: it is UTF-16 text (it starts with the byte-order mark FF FE); save it as "
        "UTF-8")

    (source / "rec_gt.txt").unlink()  # pairs: x.png beside x.txt
    (source / "a.txt").write_bytes((BOM + "hello\n").encode())
    (source / "b.txt").write_bytes("world".encode("utf-16"))
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    rows = manifest(in_tmp)
    assert rows["a.png"]["text"] == "hello" and not rows["a.png"]["error"]
    assert rows["b.png"]["error_kind"] == "bad_list"
    assert rows["b.png"]["error"].startswith("b.txt: it is UTF-16 text")


def test_a_pixel_refusal_names_max_pixels_not_pillows_limit(tmp_path):
    """A 20000 x 10000 PNG (200 M pixels, 30 KB) was refused with Pillow's "exceeds limit of
    178956970 pixels" by predict's and serve's guarded decode, whatever --max-pixels said."""
    from stages.lib.modality import get
    from stages.lib.modality.errors import BadInput
    from tests.corrupt import png_bomb

    image = get("image")
    path = tmp_path / "big.png"
    path.write_bytes(png_bomb(20_000, 10_000))
    spec = image.stored(64, 1)
    for call in (lambda f: image.read(f, spec, 50_000_000),
                 lambda f: image.read_header(f, spec, 50_000_000)):
        refusal = ""
        with open(path, "rb") as f:
            try:
                call(f)
            except BadInput as exc:
                refusal = f"{exc.kind}: {exc}"
        assert "too_large: image has 20000x10000 = 200000000 pixels, over --max-pixels 50000000 " \
               "(default: validate.max_pixels)" in refusal, refusal
        assert "178956970" not in refusal
    with open(path, "rb") as f:  # under a limit raised past Pillow's, our limit decides
        cost, draft = image.read_header(f, spec, 300_000_000)
    assert cost > 200_000_000 and draft is None
