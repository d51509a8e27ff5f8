"""Issue 30, items 1-2: segmentation `predict --out-dir` never writes into or over an input,
and keeps the inputs' relative structure so two `a.png` in different folders get two masks.

A fast model: an untrained, seeded U-Net saved as model.pt (no `dvc repro`), run with the
torch backend on real image files.
"""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.conftest import ROOT, write_image


@pytest.fixture(scope="module")
def seg_model(tmp_path_factory) -> Path:
    import torch

    from stages.lib.model.models import save_model
    from stages.tasks.segmentation.model import build_model

    torch.manual_seed(0)
    meta = {"task": "segmentation", "model": "unet", "classes": ["bg", "disc", "box"],
            "ignore_index": 255, "image_size": 16, "channels": 3, "mean": [0.5] * 3,
            "std": [0.25] * 3}
    path = tmp_path_factory.mktemp("segmodel") / "model.pt"
    save_model(path, build_model("unet", 3, 3).eval(), meta)
    return path


def predict(cwd, model, *args):
    return subprocess.run([sys.executable, "-m", "tools.predict", *args, "--backend", "torch",
                           "--model", str(model)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


def rows_of(path) -> dict:
    return {r["path"]: r for r in map(json.loads, Path(path).read_text().splitlines())}


def snapshot(root: Path) -> dict:
    """{relative path: sha256} of every file (links as links) under root."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def inputs(folder: Path) -> Path:
    """tmpin/ with 3 PNGs (whose masks would keep their names) and a JPEG."""
    for k in range(3):
        write_image(folder / f"{k}.png", size=(24, 20), mode="RGB", seed=k)
    write_image(folder / "photo.jpg", size=(30, 18), mode="RGB", fmt="JPEG", seed=7)
    return folder


def one_line_error(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("Error: "), \
        proc.stderr
    return lines[0]


def test_out_dir_dot_or_the_input_folder_itself_is_refused_and_inputs_stay(seg_model,
                                                                           tmp_path):
    src = inputs(tmp_path / "tmpin")
    (tmp_path / "alias").symlink_to(src)
    (tmp_path / "list.txt").write_text("tmpin\n")
    write_image(tmp_path / "ext/e.png", size=(20, 20), mode="RGB", seed=9)
    (src / "sub").symlink_to(tmp_path / "ext")  # its files are inputs of `predict tmpin`
    before = snapshot(tmp_path)
    # the reproduction: masks of tmpin/*.png would land on tmpin/*.png
    error = one_line_error(predict(tmp_path, seg_model, "tmpin", "--out", "p.jsonl",
                                   "--out-dir", "."))
    assert "--out-dir . would put the predictions of tmpin/ in tmpin, inside the input " \
           "folder tmpin/" in error
    # an absolute --out-dir equal to the input folder, the input given absolute too
    error = one_line_error(predict(tmp_path, seg_model, str(src), "--out", "q.jsonl",
                                   "--out-dir", str(src)))
    assert f"--out-dir {src} is the input folder {src}/ or inside it" in error
    # run from inside the input folder
    one_line_error(predict(src, seg_model, ".", "--out", "../r.jsonl", "--out-dir", "."))
    # an --out-dir inside the input folder, not there yet
    one_line_error(predict(tmp_path, seg_model, "tmpin", "--out", "s.jsonl",
                           "--out-dir", "tmpin/masks"))
    # through a symlink to the input folder, a glob whose match is the folder, an @list
    one_line_error(predict(tmp_path, seg_model, "tmpin", "--out", "t.jsonl",
                           "--out-dir", "alias"))
    one_line_error(predict(tmp_path, seg_model, "tmp*", "--out", "u.jsonl", "--out-dir", "."))
    one_line_error(predict(tmp_path, seg_model, "@list.txt", "--out", "v.jsonl",
                           "--out-dir", "alias/.."))
    # a folder reached through a symlink inside the input folder
    one_line_error(predict(tmp_path, seg_model, "tmpin", "--out", "w.jsonl",
                           "--out-dir", "ext"))
    assert snapshot(tmp_path) == before  # no input changed, no file added, no --out made


def test_file_and_list_sources_refuse_an_out_dir_inside_their_folder(seg_model, tmp_path):
    """Issue 41, item 11e: masks of file, @list and glob-of-files sources written inside the
    inputs' own folder would be inputs of the next `predict` over that folder."""
    inputs(tmp_path / "tmpin")
    (tmp_path / "files.txt").write_text("tmpin/0.png\ntmpin/photo.jpg\n")
    before = snapshot(tmp_path)
    # the reproduction: file sources, --out-dir inside their folder
    error = one_line_error(predict(tmp_path, seg_model, "tmpin/0.png", "tmpin/photo.jpg",
                                   "--out", "p.jsonl", "--out-dir", "tmpin/masks"))
    assert "--out-dir tmpin/masks is the input folder tmpin/ (the folder of the input " \
           "tmpin/0.png) or inside it" in error
    # `--out-dir .` would put tmpin/0.png's mask at tmpin/0.png (over the input)
    error = one_line_error(predict(tmp_path, seg_model, "tmpin/0.png", "tmpin/1.png",
                                   "--out", "q.jsonl", "--out-dir", "."))
    assert "would put the predictions of tmpin/ in tmpin, inside the input folder tmpin/" \
           in error
    # an @list of files, a glob of files, a file in the working directory
    one_line_error(predict(tmp_path, seg_model, "@files.txt", "--out", "r.jsonl",
                           "--out-dir", "tmpin/m"))
    one_line_error(predict(tmp_path, seg_model, "tmpin/*.png", "--out", "s.jsonl",
                           "--out-dir", "tmpin/m"))
    one_line_error(predict(tmp_path / "tmpin", seg_model, "0.png", "--out", "../t.jsonl",
                           "--out-dir", "masks"))
    assert snapshot(tmp_path) == before  # nothing written, no input changed
    # outside the inputs' folder: written, under the inputs' relative paths
    proc = predict(tmp_path, seg_model, "@files.txt", "--out", "u.jsonl", "--out-dir", "masks")
    assert proc.returncode == 0, proc.stderr
    rows = rows_of(tmp_path / "u.jsonl")
    assert rows["tmpin/0.png"]["mask_png"] == "masks/tmpin/0.png"
    assert rows["tmpin/photo.jpg"]["mask_png"] == "masks/tmpin/photo.jpg.png"
    assert {k: v for k, v in snapshot(tmp_path).items()
            if not k.startswith("masks/") and k != "u.jsonl"} == before


def test_a_mask_path_on_a_file_predict_did_not_write_is_an_error_row(seg_model, tmp_path):
    inputs(tmp_path / "tmpin")
    after = snapshot(tmp_path / "tmpin")

    # a file of the user's (or a link to an input) where a mask would go: never replaced
    out = tmp_path / "masks/tmpin"
    out.mkdir(parents=True)
    (out / "0.png").write_bytes(b"my own file")
    (out / "1.png").symlink_to(tmp_path / "tmpin/1.png")
    Image.new("L", (4, 4)).save(out / "2.png")  # a PNG, but not one predict wrote
    proc = predict(tmp_path, seg_model, "tmpin", "--out", "q.jsonl", "--out-dir", "masks")
    assert proc.returncode == 3, proc.stderr
    rows = rows_of(tmp_path / "q.jsonl")
    assert "predict did not write it" in rows["tmpin/0.png"]["error"]
    assert "a symlink" in rows["tmpin/1.png"]["error"]
    assert "predict did not write it" in rows["tmpin/2.png"]["error"]
    assert (out / "0.png").read_bytes() == b"my own file"
    assert os.readlink(out / "1.png") == str(tmp_path / "tmpin/1.png")
    assert snapshot(tmp_path / "tmpin") == after

    # its own masks, though, are rewritten by a later run (a new --out, the same --out-dir)
    for name in ("0.png", "1.png", "2.png"):
        (out / name).unlink()
    assert predict(tmp_path, seg_model, "tmpin", "--out", "r.jsonl",
                   "--out-dir", "masks").returncode == 0
    assert predict(tmp_path, seg_model, "tmpin", "--out", "s.jsonl",
                   "--out-dir", "masks").returncode == 0
    assert rows_of(tmp_path / "s.jsonl")["tmpin/0.png"]["mask_png"] == "masks/tmpin/0.png"


def test_same_names_in_different_folders_get_their_own_masks(seg_model, tmp_path):
    src = tmp_path / "in"
    write_image(src / "x/a.png", size=(24, 20), mode="RGB", seed=1)
    write_image(src / "y/a.png", size=(40, 12), mode="RGB", seed=2)
    out_dir = tmp_path / "m"
    for source, name in ((str(src), "abs.jsonl"), ("in", "rel.jsonl")):  # absolute, relative
        proc = predict(tmp_path, seg_model, source, "--out", name, "--out-dir", str(out_dir))
        assert proc.returncode == 0, proc.stderr
        rows = rows_of(tmp_path / name)
        masks = {path: row["mask_png"] for path, row in rows.items()}
        assert len(masks) == 2 and len(set(masks.values())) == 2, masks
        for path, mask in masks.items():
            assert Path(mask).is_file()
            with Image.open(tmp_path / path) as img, Image.open(mask) as m:
                assert m.size == img.size  # each row points to its own image's mask
            assert mask.endswith("/in/" + "/".join(Path(path).parts[-2:]))
    # two inputs whose masks would share a name (a.jpg -> a.jpg.png, and a.jpg.png itself):
    # the second is an error row, the first mask is kept
    write_image(src / "z/a.jpg", size=(16, 16), mode="RGB", fmt="JPEG", seed=3)
    write_image(src / "z/a.jpg.png", size=(20, 20), mode="RGB", seed=4)
    proc = predict(tmp_path, seg_model, "in/z", "--out", "z.jsonl", "--out-dir", "m")
    assert proc.returncode == 3, proc.stderr
    rows = rows_of(tmp_path / "z.jsonl")
    assert rows["in/z/a.jpg"]["mask_png"] == "m/in/z/a.jpg.png"
    assert "predict wrote it for in/z/a.jpg" in rows["in/z/a.jpg.png"]["error"]
    with Image.open(tmp_path / "m/in/z/a.jpg.png") as m:
        assert m.size == (16, 16)
