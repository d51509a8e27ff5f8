"""Issue 41, item 3: the gate's two tracked outs are the same bytes on every run.

A tree with every kind of bad file (zero bytes, text renamed .png, truncated PNG and JPEG,
random bytes, a bomb, a symlink out of the source; for segmentation the same as masks) goes
through ingest and validate twice, each time in a fresh process with no ingest cache:
data/manifest.csv and data/quarantine.csv must be byte-identical, and no reason may hold an
object's repr or memory address (`<_io.BytesIO object at 0x...>`), the temp folder's absolute
path or a time. Real files, real stage runs, four tasks.
"""
import json
import os
import re

import numpy as np
import pytest

from tests.conftest import run_stage
from tests.corrupt import encoded, photo, png_bomb, write
from tests.layouts import blob_mask, imagefolder, mask, masks, ocr_list, yolo
from tests.test_gate_hardening import params, snapshot


def bad_bytes() -> dict:
    """{suffix: bytes} of every kind of file that is not a usable image."""
    png, jpeg = encoded(photo(901), "PNG"), encoded(photo(900), "JPEG")
    return {
        "zero.png": b"",
        "text.png": b"this is a text file, not an image\n" * 20,
        "truncated.png": png[: len(png) // 2],
        "header_only.png": png[:33],
        "truncated.jpg": jpeg[: len(jpeg) // 2],
        "random.jpg": np.random.default_rng(5).bytes(3000),
        "bomb.png": png_bomb(),
        "tiny.png": encoded(photo(902, size=1), "PNG"),
    }


def hostile(task: str, source):
    """The task's small layout (tests/layouts.py) plus every bad file where its images go."""
    {"classification": imagefolder, "detection": yolo, "segmentation": masks,
     "ocr": ocr_list}[task](source)
    folder = {"classification": "cat", "detection": "images/train", "segmentation": "images",
              "ocr": "lines"}[task]
    for name, data in bad_bytes().items():
        write(source, f"{folder}/bad_{name}", data)
    outside = source.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "secret.png").write_bytes(encoded(photo(904), "PNG"))
    os.symlink(os.path.relpath(outside / "secret.png", source / folder),
               source / folder / "escape.png")
    if task == "segmentation":  # the same bad files as masks of good images
        for k, data in enumerate(bad_bytes().values()):
            stem = f"m{k:02d}"
            write(source, f"images/{stem}.png", encoded(photo(950 + k, size=40), "PNG"))
            write(source, f"masks/{stem}.png", data)
        mask(source / "masks/bad_text.png", blob_mask(40, 1))  # an image that is bad, mask ok
    if task == "detection":
        write(source, "labels/train/bad_text.txt", np.random.default_rng(6).bytes(200))
    if task == "ocr":
        with open(source / "rec_gt.txt", "a") as f:
            f.writelines(f"lines/bad_{name}\tabc\n" for name in bad_bytes())
            f.write("lines/escape.png\tabc\n")


ADDRESS = re.compile(rb"\b0x[0-9a-fA-F]{4,}")  # (not 10000x10000)
TIME = re.compile(rb"\b\d{1,2}:\d{2}:\d{2}\b|\b20\d\d-\d\d-\d\d")


@pytest.mark.parametrize("task", ["classification", "detection", "segmentation", "ocr"])
def test_ingest_and_validate_twice_write_the_same_bytes_with_no_repr_path_or_time(in_tmp,
                                                                                  task):
    source = in_tmp / "src"
    hostile(task, source)
    before = snapshot(source)
    params(in_tmp, source, task=task, on_error="quarantine", min_per_class=0)
    outs = []
    for _ in range(2):
        proc = run_stage("ingest", "--no-cache", cwd=in_tmp)
        assert proc.returncode == 0, proc.stderr
        proc = run_stage("validate", cwd=in_tmp)
        assert "Traceback" not in proc.stderr, proc.stderr
        outs.append({name: (in_tmp / "data" / name).read_bytes()
                     for name in ("manifest.csv", "quarantine.csv")})
        for name in ("manifest.csv", "quarantine.csv"):
            (in_tmp / "data" / name).unlink()
    assert outs[0] == outs[1]
    quarantine = outs[0]["quarantine.csv"].decode()
    for name in bad_bytes():  # every bad file is named, with a reason
        assert f"bad_{name}," in quarantine, (name, quarantine)
    for name, data in outs[0].items():
        assert not ADDRESS.search(data), (name, ADDRESS.search(data))
        assert not TIME.search(data), (name, TIME.search(data))
        assert str(in_tmp).encode() not in data and b"/tmp/" not in data, name
        assert b" object at " not in data, name
    if task == "segmentation":
        assert "mask masks/m00.png is an empty file (0 bytes)" in quarantine
        assert "mask masks/m01.png cannot be decoded (UnidentifiedImageError: not an image " \
               "format Pillow knows)" in quarantine, quarantine
    assert snapshot(source) == before  # no input byte changed


def test_decode_error_keeps_no_repr_address_or_absolute_path(tmp_path):
    import io

    from PIL import Image

    from stages.lib.modality.errors import decode_error

    for source in (io.BytesIO(b"not an image"), str(tmp_path / "x.png")):
        if isinstance(source, str):
            with open(source, "wb") as f:
                f.write(b"not an image")
        try:
            Image.open(source)
        except Exception as exc:  # noqa: BLE001 - Pillow's own error
            text = decode_error(exc, source)
        assert text == "UnidentifiedImageError: not an image format Pillow knows"
    exc = OSError(f"broken data stream when reading image file {tmp_path}/x.png at "
                  f"<_io.BufferedReader object at 0x7f3a2b1c0d90>")
    text = decode_error(exc, tmp_path / "x.png")
    assert text == "OSError: broken data stream when reading image file x.png at the file"
    assert json.dumps(text)  # one plain line
