import numpy as np
from PIL import Image

from stages.tasks.classification.sample import digit_images, pgm_bytes
from tests.conftest import run_stage


def test_pgm_bytes_decode_to_the_same_pixels(tmp_path):
    pixels = np.arange(48, dtype=np.uint8).reshape(6, 8)
    path = tmp_path / "x.pgm"
    path.write_bytes(pgm_bytes(pixels))
    with Image.open(path) as img:
        assert img.size == (8, 6) and img.mode == "L"
        assert np.array_equal(np.asarray(img), pixels)


def test_digit_images_cover_all_classes_and_scale_to_full_range():
    items = list(digit_images())
    assert len(items) == 1797
    assert {rel.split("/")[0] for rel, _ in items} == {str(d) for d in range(10)}
    pixels = np.frombuffer(items[0][1][-64:], dtype=np.uint8)
    assert pixels.max() == 255 or pixels.max() > 200


def test_per_class_limits_each_class():
    items = list(digit_images(per_class=3))
    labels = [rel.split("/")[0] for rel, _ in items]
    assert len(items) == 30 and all(labels.count(str(d)) == 3 for d in range(10))


def test_stage_writes_identical_bytes_twice(in_tmp):
    (in_tmp / "params.yaml").write_text("sample:\n  per_class: 2\n")
    assert run_stage("sample", cwd=in_tmp).returncode == 0
    first = {p: p.read_bytes() for p in sorted((in_tmp / "data/sample").rglob("*.pgm"))}
    assert run_stage("sample", cwd=in_tmp).returncode == 0
    second = {p: p.read_bytes() for p in sorted((in_tmp / "data/sample").rglob("*.pgm"))}
    assert len(first) == 20 and first == second
