import numpy as np
from PIL import Image

from stages.lib.images import inspect_image, load_image, normalize, sha256_file
from tests.conftest import write_image


def test_load_image_converts_and_resizes(tmp_path):
    path = write_image(tmp_path / "a.jpg", size=(40, 20), mode="RGB", fmt="JPEG")
    grey = load_image(path, 8, 1)
    rgb = load_image(path, 8, 3)
    assert grey.shape == (8, 8, 1) and rgb.shape == (8, 8, 3) and grey.dtype == np.uint8
    with Image.open(path) as img:
        expected = np.asarray(img.convert("L").resize((8, 8), Image.Resampling.BILINEAR))
    assert np.array_equal(grey[..., 0], expected)


def test_normalize_scales_standardises_and_moves_channels_first():
    batch = np.array([[[[0, 255]]]], dtype=np.uint8)  # N=1, H=1, W=1, C=2
    x = normalize(batch, mean=[0.5, 0.5], std=[0.5, 0.25])
    assert x.shape == (1, 2, 1, 1) and x.dtype == np.float32
    assert np.allclose(x[0, :, 0, 0], [-1.0, 2.0])


def test_inspect_full_decode_catches_truncation(tmp_path):
    good = write_image(tmp_path / "g.png", size=(64, 64))
    (tmp_path / "t.png").write_bytes(good.read_bytes()[:200])
    assert inspect_image(good)["error"] == ""
    facts = inspect_image(tmp_path / "t.png")
    assert facts["width"] == 64 and facts["error"].startswith("cannot decode")


def test_sha256_reads_in_chunks(tmp_path):
    import hashlib

    data = np.random.default_rng(0).bytes(3 * (1 << 20) + 5)
    (tmp_path / "big").write_bytes(data)
    assert sha256_file(tmp_path / "big") == hashlib.sha256(data).hexdigest()
