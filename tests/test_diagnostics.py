"""Issue 30, items 11-14 and 16: globs over unreadable folders, the --beam bound, --retry-failed
through a symlinked --out, control characters in transcripts and logs, and the diagnostics
that named too little (no_labels files, huge numbers, nnU-Net's mask_size, @FIFO lists,
undecodable masks).

Permission cases drop root's CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH with `setpriv`
(tests/test_hardening.py), so a mode-000 folder is unreadable even to root.
"""
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
    from stages.tasks.ocr.ctc import beam

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
