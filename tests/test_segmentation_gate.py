"""The segmentation gate (issue 19): a tree holding every bad kind gets every offender named,
the nnU-Net layout with its own split, the sample's bytes, masks resized by nearest neighbour,
augmentation moving image and mask together, and the metrics against hand-computed values."""
import hashlib
import json
import struct
import zlib
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from tests.conftest import ROOT, run_stage, segmentation_params, write_image
from tools.project import copy_project


def write_mask(path, values, mode="L"):
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.asarray(values, dtype=np.uint8)
    if mode == "P":
        img = Image.fromarray(arr, "P")
        img.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255] + [0] * 756)
    elif mode == "RGB":
        img = Image.fromarray(np.stack([arr] * 3, -1), "RGB")
    else:
        img = Image.fromarray(arr, "L")
    img.save(path)
    return path


def good_mask(seed, size=16):
    """A mask with background and classes 1 and 2 (never 3)."""
    m = np.zeros((size, size), dtype=np.uint8)
    m[2:8, 2:8] = 1
    m[9:14, 3 + seed % 4:10] = 2
    return m


def project_with(tmp_path, source, **params):
    root = copy_project(ROOT, tmp_path / "project",
                        params={**segmentation_params(), "task": "segmentation",
                                "data.source": str(source), **params}, git_init=False)
    return root


def test_gate_names_every_bad_mask_of_each_kind(tmp_path):
    src = tmp_path / "data"
    (src / "classes.yaml").parent.mkdir(parents=True)
    (src / "classes.yaml").write_text("0: background\n1: disc\n2: box\n3: star\nignore: 255\n")
    for i in range(8):  # good pairs, one of them with a palette mask and some ignore pixels
        write_image(src / f"images/ok{i}.png", (16, 16), "RGB", seed=i)
        m = good_mask(i)
        m[0, :] = 255 if i == 1 else 0
        write_mask(src / f"masks/ok{i}.png", m, "P" if i == 0 else "L")
    write_image(src / "images/nomask.png", (16, 16), "RGB", seed=20)
    write_mask(src / "masks/orphan.png", good_mask(0))
    write_image(src / "images/small.png", (16, 16), "RGB", seed=21)
    write_mask(src / "masks/small.png", good_mask(0, size=8))
    write_image(src / "images/rgbmask.png", (16, 16), "RGB", seed=22)
    write_mask(src / "masks/rgbmask.png", good_mask(0), "RGB")
    write_image(src / "images/values.png", (16, 16), "RGB", seed=23)
    m = good_mask(0)
    m[5, 5] = 7
    write_mask(src / "masks/values.png", m)
    write_image(src / "images/ignored.png", (16, 16), "RGB", seed=24)
    write_mask(src / "masks/ignored.png", np.full((16, 16), 255))
    write_image(src / "images/corrupt.png", (16, 16), "RGB", seed=25)
    (src / "masks/corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    write_image(src / "stray.png", (16, 16), "RGB", seed=26)
    write_image(src / "images/huge.png", (16, 16), "RGB", seed=27)
    (src / "masks/huge.png").write_bytes(png_header(20_000, 20_000))
    before = {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}

    root = project_with(tmp_path, src)
    assert run_stage("ingest", cwd=root).returncode == 0
    proc = run_stage("validate", cwd=root)
    assert proc.returncode != 0
    expected = {"no_mask": ["images/nomask.png", "stray.png"],
                "orphan_mask": ["masks/orphan.png"], "mask_size": ["images/small.png"],
                "mask_mode": ["images/rgbmask.png"], "mask_values": ["images/values.png"],
                "mask_all_ignore": ["images/ignored.png"], "bad_mask": ["images/corrupt.png"],
                "mask_too_large": ["images/huge.png"], "absent_class": ["star"]}
    for check, keys in expected.items():
        for key in keys:
            assert f"[{check}] {key}:" in proc.stderr, (check, key, proc.stderr)
    assert "8x8 but the image is 16x16" in proc.stderr
    assert "value(s) 7 outside the classes 0, 1, 2, 3" in proc.stderr
    assert ("mask masks/huge.png is 20000x20000 = 400000000 pixels, over "
            "validate.max_pixels") in proc.stderr
    assert "178956970" not in proc.stderr and "decompression bomb DOS" not in proc.stderr
    metrics = json.loads((root / "metrics/validation.json").read_text())
    counts = json.loads((root / "metrics/validation_checks.json").read_text())
    assert {c: counts[c] for c in expected} == {c: len(k) for c, k in
                                                          expected.items()}
    assert metrics["invalid"] == 9
    seg = metrics["segmentation"]
    assert seg["classes"] == ["background", "disc", "box", "star"]
    assert seg["image_share"] == {"background": 1.0, "disc": 1.0, "box": 1.0, "star": 0.0}
    assert seg["ignored_pixels"] == 16
    labelled = 8 * 256 - 16
    assert seg["pixel_frequency"]["disc"] == pytest.approx(8 * 36 / labelled, abs=1e-6)
    after = {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}
    assert after == before  # nothing modified


def png_header(width, height):
    """A PNG whose IHDR claims width x height 8-bit grey pixels, with one empty IDAT: a few
    dozen bytes, nothing allocated; Pillow opens its header and fails only on load."""
    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b""))
            + chunk(b"IEND", b""))


def test_read_mask_refuses_by_validate_max_pixels_not_pillows_limit(tmp_path):
    from stages.tasks.segmentation.annotations import read_mask

    huge = tmp_path / "huge.png"
    huge.write_bytes(png_header(20_000, 20_000))  # 4e8 px: past Pillow's 178,956,970 too
    facts = read_mask(huge, "masks/huge.png", max_pixels=10**9)  # our limit allows it:
    assert facts["error_kind"] == "bad_mask"  # decoded, and found truncated (no pixels)
    assert "178956970" not in facts["error"]
    facts = read_mask(huge, "masks/huge.png", max_pixels=5_000_000)
    assert facts["error_kind"] == "mask_too_large"
    assert facts["error"].startswith("mask masks/huge.png is 20000x20000 = 400000000 pixels, "
                                     "over validate.max_pixels (5000000)")
    assert "raise validate.max_pixels in params.yaml" in facts["error"]
    small = tmp_path / "small.png"
    Image.fromarray(np.zeros((4, 5), np.uint8), "L").save(small)
    facts = read_mask(small, "masks/small.png", max_pixels=20)  # at the limit: decoded
    assert facts["size"] == "5x4" and facts["counts"] == {0: 20}
    assert read_mask(small, "masks/small.png", max_pixels=19)["error_kind"] == "mask_too_large"


def test_nnunet_layout_ingests_with_its_own_split(tmp_path):
    src = tmp_path / "nnunet"
    src.mkdir()
    (src / "dataset.json").write_text(json.dumps({
        "channel_names": {"0": "rgb"}, "labels": {"background": 0, "disc": 1, "box": 2},
        "numTraining": 6, "file_ending": ".png"}))
    for i in range(6):
        write_image(src / f"imagesTr/case{i}_0000.png", (16, 16), "RGB", seed=i)
        write_mask(src / f"labelsTr/case{i}.png", good_mask(i))
    for i in range(2):
        write_image(src / f"imagesTs/test{i}_0000.png", (16, 16), "RGB", seed=10 + i)
        write_mask(src / f"labelsTs/test{i}.png", good_mask(i))
    root = project_with(tmp_path, src, **{"split.by": "given", "split.val": 0.3})
    for stage in ("ingest", "validate", "split"):
        proc = run_stage(stage, cwd=root)
        assert proc.returncode == 0, proc.stderr
    manifest = {r.split(",")[0]: r for r in (root / "data/manifest.csv").read_text().splitlines()}
    assert "labelsTr/case0.png" not in manifest  # masks are annotations, not images
    row = manifest["imagesTr/case0_0000.png"]
    digest = hashlib.sha256((src / "labelsTr/case0.png").read_bytes()).hexdigest()
    assert "labelsTr/case0.png" in row and digest in row and row.endswith(",train")
    assert manifest["imagesTs/test1_0000.png"].endswith(",test")
    test = (root / "data/split/test.csv").read_text()
    assert "imagesTs/test0_0000.png" in test and "imagesTr" not in test


def test_sample_bytes_are_fixed_and_masks_exact():
    from stages.tasks.segmentation.sample import sample_files

    files = list(sample_files(3))
    digest = hashlib.sha256(b"".join(n.encode() + d for n, d in files)).hexdigest()
    assert digest == SAMPLE_SHA256
    mask = np.asarray(Image.open(__import__("io").BytesIO(dict(files)["masks/00001.png"])))
    assert mask.dtype == np.uint8 and set(np.unique(mask)) <= {0, 1, 2, 3} and mask.max() > 0


SAMPLE_SHA256 = "af81be315cc9b5ffb9e89c27ed083a7804b5d3e1088af468946e946b155397c8"


def test_prepare_encoder_resizes_masks_by_nearest_and_maps_ignore(tmp_path):
    from stages.tasks.segmentation import TASK

    m = np.zeros((8, 8), dtype=np.uint8)
    m[:4] = 2
    m[4:, :4] = 9  # the dataset's ignore value
    write_mask(tmp_path / "masks/a.png", m)
    encode = TASK.encoder({"classes": ["bg", "a", "b"], "ignore_index": 9,
                           "source": str(tmp_path)})
    y = encode({"mask": "masks/a.png"}, np.zeros((16, 16, 3), dtype=np.uint8))
    assert y.shape == (16, 16) and y.dtype == np.uint8
    assert set(np.unique(y)) == {0, 2, 255}  # nearest: no value between classes
    assert (y[:8] == 2).all() and (y[8:, :8] == 255).all() and (y[8:, 8:] == 0).all()


def test_augment_moves_the_mask_with_the_image():
    import torch

    from stages.tasks.segmentation.transforms import augment

    x = torch.zeros(3, 64, 64)
    x[:, 8:24, 4:16] = 1.0
    y = torch.zeros(64, 64, dtype=torch.uint8)
    y[8:24, 4:16] = 1
    p = SimpleNamespace(aug_crop_scale=0.6, aug_hflip=1.0, aug_rotate=0.0, aug_jitter=0.0)
    for seed in range(5):
        xa, ya = augment(x, y, p, seed)
        assert ya.dtype == torch.uint8 and ya.shape == (64, 64)
        assert set(ya.unique().tolist()) <= {0, 1}
        shape, labelled = xa[0] > 0.5, ya == 1
        assert (shape & labelled).sum() / (shape | labelled).sum() > 0.95  # IoU: the same place
    p = SimpleNamespace(aug_crop_scale=1.0, aug_hflip=1.0, aug_rotate=0.0, aug_jitter=0.0)
    xa, ya = augment(x, y, p, 0)
    assert (ya == y.flip(-1)).all() and (xa == x.flip(-1)).all()


def test_metrics_match_a_hand_computed_case():
    from stages.tasks.segmentation.metrics import confusion, image_miou, scores

    truth = np.array([[0, 0, 1], [1, 2, 255]])
    pred = np.array([[0, 1, 1], [1, 0, 3]])  # 3: class 3 exists only in the prediction
    cm = confusion(truth, pred, 4)
    # labelled pixels: (0,0) (0,1) (1,1) (1,1) (2,0); the ignored one is left out
    assert cm.tolist() == [[1, 1, 0, 0], [0, 2, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]]
    s = scores(cm)
    # class 0: TP 1, FP 1 (the 2 predicted as 0), FN 1 -> 1/3; class 1: TP 2, FP 1 -> 2/3;
    # class 2: TP 0, FN 1 -> 0; class 3: in neither -> None, left out of the mean
    assert s["iou"][:3] == pytest.approx([1 / 3, 2 / 3, 0.0]) and len(s["iou"]) == 4
    assert s["iou"][3] is None and s["dice"][3] is None
    assert s["dice"][:3] == pytest.approx([2 / 4, 4 / 5, 0.0])
    assert s["pixel_accuracy"] == pytest.approx(3 / 5)
    assert image_miou(truth, pred, 4) == pytest.approx((1 / 3 + 2 / 3 + 0) / 3)


def test_metrics_agree_with_torchmetrics():
    torch = pytest.importorskip("torch")
    tm = pytest.importorskip("torchmetrics.segmentation")
    from stages.tasks.segmentation.metrics import confusion, mean, scores

    rng = np.random.default_rng(0)
    truth = rng.integers(0, 4, size=(3, 12, 12))
    pred = np.where(rng.random((3, 12, 12)) < 0.7, truth, rng.integers(0, 4, (3, 12, 12)))
    s = scores(confusion(truth, pred, 4))
    miou = tm.MeanIoU(num_classes=4, input_format="index", per_class=True)
    miou.update(torch.from_numpy(pred).reshape(1, -1), torch.from_numpy(truth).reshape(1, -1))
    assert miou.compute().numpy() == pytest.approx(s["iou"], abs=1e-6)
    dice = tm.DiceScore(num_classes=4, input_format="index", average=None)
    dice.update(torch.from_numpy(pred).reshape(1, -1), torch.from_numpy(truth).reshape(1, -1))
    assert dice.compute().numpy() == pytest.approx(s["dice"], abs=1e-6)
    assert mean(s["iou"]) == pytest.approx(float(np.mean(s["iou"])))
