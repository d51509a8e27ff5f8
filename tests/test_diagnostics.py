"""Issue 30, items 11-14 and 16: globs over unreadable folders, the --beam bound, --retry-failed
through a symlinked --out, control characters in transcripts and logs, and the diagnostics
that named too little (no_labels files, huge numbers, nnU-Net's mask_size, @FIFO lists,
undecodable masks).

Permission cases drop root's CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH with `setpriv`
(tests/test_hardening.py), so a mode-000 folder is unreadable even to root.
"""
import json
import stat

import pytest

from tests import test_hardening
from tests.conftest import run_tool, write_image
from tests.test_hardening import can_drop_dac, predict, rows_of

onnx_model = test_hardening.onnx_model  # the fake project's exported model (a session fixture)


# --- 11. a glob over an unreadable folder gives it an `unreadable` row -------------------

@pytest.mark.skipif(not can_drop_dac(), reason="needs setpriv to drop root's DAC override")
def test_a_glob_over_an_unreadable_folder_gives_it_an_unreadable_row(onnx_model, tmp_path):
    write_image(tmp_path / "d/ok/1.png", size=(20, 20))
    locked = tmp_path / "d/locked"
    write_image(locked / "2.png", size=(20, 20))
    locked.chmod(0)
    try:
        proc = predict(tmp_path, onnx_model, "d/**/*.png", "--out", "p.jsonl", timeout=60,
                       no_dac=True)
    finally:
        locked.chmod(0o755)
    assert proc.returncode == 3, proc.stderr
    rows = {r["path"]: r["error"] for r in rows_of(tmp_path / "p.jsonl")}
    assert rows["d/ok/1.png"] == ""
    assert rows["d/locked"].startswith("unreadable: cannot list this folder"), rows
    assert len(rows) == 2, rows


def test_a_glob_through_folders_that_do_not_exist_gives_no_unreadable_row(onnx_model,
                                                                           tmp_path):
    write_image(tmp_path / "d/a/x/1.png", size=(20, 20))
    (tmp_path / "d/b").mkdir()  # no x/ below it: not a problem, simply no match
    proc = predict(tmp_path, onnx_model, "d/*/x/*.png", "--out", "p.jsonl", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [r["path"] for r in rows_of(tmp_path / "p.jsonl")] == ["d/a/x/1.png"]


# --- 12. --beam has an upper bound, in the CLI and in the search ---------------------------

@pytest.mark.parametrize("tool", ["predict", "serve"])
def test_beam_above_the_bound_is_a_usage_error_naming_it(tool, tmp_path):
    write_image(tmp_path / "x.png")
    args = ["x.png"] if tool == "predict" else []
    proc = run_tool(tool, *args, "--beam", "100000", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "--beam" in proc.stderr and "at most 64" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_beam_search_refuses_a_width_above_the_bound():
    import numpy as np

    from stages.lib.params import MAX_BEAM
    from stages.tasks.common.ctc import beam

    logits = np.zeros((1, 4, 3), np.float32)
    assert beam(logits, "ab", MAX_BEAM)  # the bound itself runs
    with pytest.raises(ValueError, match=str(MAX_BEAM)):
        beam(logits, "ab", MAX_BEAM + 1)


# --- 13. --retry-failed writes through a symlinked --out and keeps its mode ---------------

def test_retry_failed_writes_through_a_symlinked_out_and_keeps_its_mode(onnx_model,
                                                                        tmp_path):
    write_image(tmp_path / "in/a.png", size=(20, 20))
    (tmp_path / "in/b.png").write_bytes(b"not an image")
    real = tmp_path / "store/real.jsonl"
    real.parent.mkdir()
    assert predict(tmp_path, onnx_model, "in", "--out", "store/real.jsonl").returncode == 3
    link = tmp_path / "p.jsonl"
    link.symlink_to(real)
    real.chmod(0o644)
    write_image(tmp_path / "in/b.png", size=(20, 20), seed=1)  # fixed
    proc = predict(tmp_path, onnx_model, "--retry-failed", "--out", "p.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and link.resolve() == real
    assert stat.S_IMODE(real.stat().st_mode) == 0o644
    rows = rows_of(real)
    assert sorted(r["path"] for r in rows) == ["in/a.png", "in/b.png"]
    assert all(r["error"] == "" for r in rows)
    assert not [p for p in real.parent.iterdir() if p != real]  # no temp file left


def test_overwrite_writes_through_a_symlinked_out_and_keeps_its_mode(onnx_model, tmp_path):
    write_image(tmp_path / "in/a.png", size=(20, 20))
    real = tmp_path / "store/real.jsonl"
    real.parent.mkdir()
    real.write_text('{"path": "in/a.png", "label": "x", "score": 1.0, "topk": [], '
                    '"error": "", "model": "0000"}\n')  # another model's row
    real.chmod(0o640)
    link = tmp_path / "p.jsonl"
    link.symlink_to(real)
    proc = predict(tmp_path, onnx_model, "in", "--out", "p.jsonl", "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and link.resolve() == real
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert [r["model"] != "0000" for r in rows_of(real)] == [True]


def test_the_atomic_writer_replaces_the_target_of_a_link(tmp_path):
    from stages.lib.io import replace_file

    real = tmp_path / "real.txt"
    real.write_text("old\n")
    real.chmod(0o604)
    (tmp_path / "link.txt").symlink_to("real.txt")
    with replace_file(tmp_path / "link.txt") as f:
        f.write(b"new\n")
    assert (tmp_path / "link.txt").is_symlink() and real.read_text() == "new\n"
    assert stat.S_IMODE(real.stat().st_mode) == 0o604
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "real.txt"]
    with pytest.raises(RuntimeError), replace_file(real) as f:  # an error: nothing replaced
        f.write(b"half")
        raise RuntimeError
    assert real.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "real.txt"]


# --- 14. transcripts of control or zero-width characters; user strings escaped in logs ----

INVISIBLE = {"nul": "\x00", "esc": "\x1b", "rlo": "\u202e", "zwsp": "\u200b\u200b"}


def ocr_tree(project, charset=""):
    from tests.conftest import copy_ocr_project, ocr_params

    root = copy_ocr_project(project, ocr_params(**{"data.source": "data/lines",
                                                    "validate.charset": charset}))
    lines = root / "data/lines"
    for i, word in enumerate(["hello", "world", "abc", "xyz", "ocr", "line"]):
        write_image(lines / f"ok/{i}.png", size=(60, 32), seed=i)
        (lines / f"ok/{i}.txt").write_text(word)
    for i, (name, chars) in enumerate(INVISIBLE.items()):
        write_image(lines / f"bad/{name}.png", size=(60, 32), seed=10 + i)
        (lines / f"bad/{name}.txt").write_text(chars, encoding="utf-8")
    write_image(lines / "bad/e\x1b[31mred.png", size=(60, 32), seed=20)  # ESC in a name
    (lines / "bad/e\x1b[31mred.txt").write_text("\x1b[2J")  # clear-screen, and more
    return root


def test_a_transcript_of_only_invisible_characters_is_a_named_warning(tmp_path):
    from tests.conftest import run_stage

    root = ocr_tree(tmp_path / "project")
    assert run_stage("ingest", cwd=root).returncode == 0
    proc = run_stage("validate", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr  # nothing raw reaches the terminal
    warning = [ln for ln in proc.stdout.splitlines() if "invisible_text" in ln]
    assert len(warning) == 1, proc.stdout
    for name in INVISIBLE:
        assert f"bad/{name}.png" in warning[0], warning
    assert "bad/e\\x1b[31mred.png" in warning[0]  # ESC amid visible text: flagged too
    counts = json.loads((root / "metrics/validation_checks.json").read_text())
    assert counts["invisible_text"] == len(INVISIBLE) + 1


def test_with_a_charset_invisible_characters_block_and_are_printed_escaped(tmp_path):
    from tests.conftest import run_stage

    root = ocr_tree(tmp_path / "project", charset="abcdefghijklmnopqrstuvwxyz[]0123456789")
    assert run_stage("ingest", cwd=root).returncode == 0
    proc = run_stage("validate", cwd=root)
    assert proc.returncode == 1
    assert "\x1b" not in proc.stdout + proc.stderr
    assert "\u202e" not in proc.stderr and "\u200b" not in proc.stderr
    for name in INVISIBLE:
        assert f"bad/{name}.png:" in proc.stderr, proc.stderr
    assert "bad/e\\x1b[31mred.png" in proc.stderr, proc.stderr  # the name, escaped


def test_user_strings_and_numbers_print_short_and_escaped():
    from stages.lib.show import number, some, text

    assert text("a\x1b[31mb\x00\u202e\u200b\u2028") == "a\\x1b[31mb\\x00\\u202e\\u200b\\u2028"
    assert text("café 中") == "café 中"
    assert number(0.25) == "0.2500" and number(1e308) == "1e+308"
    assert some([f"f{i}" for i in range(8)], cap=3) == "f0, f1, f2 and 5 more"


# --- 16. diagnostics that named too little ------------------------------------------------

def test_no_labels_names_its_files_and_a_huge_box_prints_short(in_tmp):
    from tests.conftest import run_stage
    from tests.test_detection_gate import GOOD, params

    source = in_tmp / "yolo"
    (source / "labels/train").mkdir(parents=True)
    (source / "data.yaml").write_text("names: [ring, block]\n")
    for k in range(5):
        write_image(source / f"images/train/good{k}.png", (64, 64), "RGB", seed=k)
        (source / f"labels/train/good{k}.txt").write_text(GOOD)
    for k in range(7):  # background: no label file
        write_image(source / f"images/val/bg{k}.png", (64, 64), "RGB", seed=20 + k)
    write_image(source / "images/train/huge.png", (64, 64), "RGB", seed=40)
    (source / "labels/train/huge.txt").write_text("0 1e308 0.5 0.2 0.2\n")
    params(in_tmp, source)
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    proc = run_stage("validate", cwd=in_tmp)
    assert proc.returncode == 1
    warning = [ln for ln in proc.stdout.splitlines() if "no_labels" in ln]
    assert len(warning) == 1, proc.stdout
    assert "images/val/bg0.png" in warning[0] and "images/val/bg4.png" in warning[0]
    assert "and 2 more" in warning[0] and "reports/validation.html" in warning[0]
    line = [ln for ln in proc.stderr.splitlines() if "images/train/huge.png" in ln]
    assert len(line) == 1 and "1e+308" in line[0], proc.stderr
    assert len(line[0]) < 300, line[0]  # not 309 digits


def test_a_list_that_is_a_fifo_is_named_as_not_a_regular_file(tmp_path):
    import os

    os.mkfifo(tmp_path / "list.txt")
    proc = run_tool("predict", "@list.txt", "--out", "p.jsonl", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "list.txt" in proc.stderr and "not a regular file" in proc.stderr, proc.stderr
    assert "a FIFO" in proc.stderr and "not found" not in proc.stderr


def test_an_undecodable_mask_names_the_mask_the_cause_and_the_fix(tmp_path):
    from tests.conftest import run_stage
    from tests.test_segmentation_gate import good_mask, project_with, write_mask

    src = tmp_path / "data"
    for i in range(4):
        write_image(src / f"images/ok{i}.png", (16, 16), "RGB", seed=i)
        write_mask(src / f"masks/ok{i}.png", good_mask(i))
    write_image(src / "images/broken.png", (16, 16), "RGB", seed=9)
    good = write_mask(tmp_path / "whole.png", good_mask(0)).read_bytes()
    (src / "masks/broken.png").write_bytes(good[:len(good) // 2])  # truncated
    root = project_with(tmp_path, src)
    assert run_stage("ingest", cwd=root).returncode == 0
    proc = run_stage("validate", cwd=root)
    line = [ln for ln in proc.stderr.splitlines() if "images/broken.png" in ln]
    assert len(line) == 1, proc.stderr
    assert "masks/broken.png" in line[0], line  # the mask named
    assert "truncated" in line[0] or "decod" in line[0], line  # what failed
    assert "re-save" in line[0] or "re-export" in line[0], line  # the fix


def test_an_error_naming_a_users_file_prints_its_name_escaped(onnx_model, tmp_path):
    """Item 14, every error: a StageError's message (here predict refusing an --out that is
    not its own) prints a name's ESC and bidi override escaped, its own line breaks kept."""
    write_image(tmp_path / "in/a.png")
    out = tmp_path / "notes\x1b[2J\u202etxt.jsonl"
    out.write_text("my notes\n")
    proc = predict(tmp_path, onnx_model, "in", "--out", out.name, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "notes\\x1b[2J\\u202etxt.jsonl: not a predict output" in proc.stderr, proc.stderr
    assert "\x1b" not in proc.stderr and "\u202e" not in proc.stderr
    assert out.read_text() == "my notes\n"  # refused, untouched
