import numpy as np
import pytest
from PIL import Image

from stages.lib.io import sha256_file
from stages.lib.modality.imagecore import inspect, load_image, normalize
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


@pytest.mark.parametrize("shape,mean,std", [
    ((64, 32, 32, 3), [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ((3, 17, 9, 1), [0.1307], [0.3081]),
    ((2, 5, 40, 3), [0.5], [0.5]),  # one value for every channel
    ((0, 8, 8, 3), [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]),
])
def test_normalize_has_the_bits_of_the_plain_three_pass_form(shape, mean, std):
    """normalize works per channel plane, in place; every element must get the same float32
    operations as the plain form (the trained models and dvc.lock depend on these bits)."""
    batch = np.random.default_rng(len(shape) + shape[0]).integers(0, 256, shape, dtype=np.uint8)
    plain = (batch.astype(np.float32) / 255.0 - np.asarray(mean, dtype=np.float32)) \
        / np.asarray(std, dtype=np.float32)
    want = np.ascontiguousarray(plain.transpose(0, 3, 1, 2))
    got = normalize(batch, mean, std)
    assert got.dtype == np.float32 and got.flags.c_contiguous
    assert got.shape == want.shape and got.tobytes() == want.tobytes()
    # and its strides: torch picks its convolution by them (a grey batch's channel stride of 1
    # reads as channels-last), so other strides train other bits
    assert got.strides == want.strides


def test_inspect_full_decode_catches_truncation(tmp_path):
    good = write_image(tmp_path / "g.png", size=(64, 64))
    (tmp_path / "t.png").write_bytes(good.read_bytes()[:200])
    assert inspect(good)["error"] == ""
    facts = inspect(tmp_path / "t.png")
    assert facts["width"] == 64 and facts["error"].startswith("cannot decode")


def test_sha256_reads_in_chunks(tmp_path):
    import hashlib

    data = np.random.default_rng(0).bytes(3 * (1 << 20) + 5)
    (tmp_path / "big").write_bytes(data)
    assert sha256_file(tmp_path / "big") == hashlib.sha256(data).hexdigest()


def test_odd_modes_convert_one_way(tmp_path):
    from stages.lib.modality.imagecore import to_model_mode

    grey16 = np.arange(0, 65536, 256, dtype=np.uint16).reshape(16, 16)
    Image.fromarray(grey16).save(tmp_path / "deep.png")
    with Image.open(tmp_path / "deep.png") as img:
        assert img.mode.startswith("I")
        out = np.asarray(to_model_mode(img, 1))
    assert np.array_equal(out, (grey16 >> 8).astype(np.uint8))  # scaled by value, not clipped

    rgb = Image.fromarray(np.full((8, 8, 3), (200, 100, 50), dtype=np.uint8))
    pal = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=4)
    pal.putpixel((0, 0), 3)
    pal.save(tmp_path / "pal.png", transparency=3)
    with Image.open(tmp_path / "pal.png") as img:
        out = np.asarray(to_model_mode(img, 3))
    assert out[0, 0].tolist() == [0, 0, 0] and out[1, 1].tolist() == [200, 100, 50]

    rgb.convert("CMYK").save(tmp_path / "cmyk.jpg", quality=100)
    assert load_image(tmp_path / "cmyk.jpg", 8, 3).shape == (8, 8, 3)

    frames = [Image.new("L", (8, 8), v) for v in (10, 250)]
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:])
    assert inspect(tmp_path / "anim.gif")["frames"] == 2
    first = load_image(tmp_path / "anim.gif", 8, 1)
    assert abs(int(first.mean()) - 10) <= 1  # the first frame, however the file was left


def test_inspect_reports_facts_and_phash(tmp_path):
    path = write_image(tmp_path / "a.png", size=(40, 30), mode="RGB")
    facts = inspect(path)
    assert (facts["format"], facts["width"], facts["height"], facts["mode"]) == ("PNG", 40, 30,
                                                                                "RGB")
    assert facts["frames"] == 1 and facts["bits"] == 8 and facts["alpha"] == 0
    assert len(facts["phash"]) == 16
    assert inspect(tmp_path / "a.png", with_phash=False)["phash"] == ""


BOMB_PROBE = """
import resource, sys
from stages.lib.modality.imagecore import inspect
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
facts = inspect(sys.argv[1], max_pixels=50_000_000)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(facts["width"], facts["height"], grown // 1024, facts["error"])
"""


def test_decompression_bomb_is_caught_from_the_header_without_decoding(tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT
    from tests.corrupt import png_bomb

    (tmp_path / "bomb.png").write_bytes(png_bomb(10000, 10000))  # 100 Mpixel in ~15 KB
    proc = subprocess.run([sys.executable, "-c", BOMB_PROBE, str(tmp_path / "bomb.png")],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    width, height, grown_mib, error = proc.stdout.split(" ", 3)
    assert (width, height) == ("10000", "10000")
    assert error.startswith("too large") and "not decoded" in error
    assert int(grown_mib) < 30  # decoding would take 100 MiB


def test_phash_is_imagehash_phash_up_to_resampling():
    import imagehash

    from stages.lib.modality.imagecore import phash
    from tests.corrupt import photo

    for seed in range(8):
        for size in (48, 200):
            img = photo(seed, size=size)
            ours, theirs = int(phash(img), 16), int(str(imagehash.phash(img)), 16)
            assert bin(ours ^ theirs).count("1") <= 4
    assert bin(int(phash(photo(1)), 16) ^ int(phash(photo(2)), 16)).count("1") > 10


def test_hash_input_fast_path_is_the_shared_conversion(tmp_path):
    """inspect hashes `hash_input(img)`: for every kind of image it must be the very
    pixels of `to_model_mode(shrunk(img), 1)`, or manifests would change with the fast path."""
    from stages.lib.modality.imagecore import (ORIENTATION, hash_input, phash, prefer_grey, shrunk,
                                   to_model_mode)
    from tests.corrupt import photo

    rotated = Image.Exif()
    rotated[ORIENTATION] = 6
    pictures = []
    for size in (40, 300):
        rgb = photo(7, size=size).resize((size, size * 2 // 3))
        pictures += [(rgb, "PNG", {}), (rgb, "JPEG", {}), (rgb.convert("L"), "JPEG", {}),
                     (rgb, "JPEG", {"exif": rotated.tobytes()}),
                     (rgb, "PNG", {"transparency": rgb.getpixel((0, 0))}),
                     (rgb.convert("RGBA"), "PNG", {}),
                     (rgb.convert("P"), "PNG", {}), (rgb.convert("CMYK"), "JPEG", {}),
                     (rgb, "GIF", {"save_all": True, "append_images": [photo(8, size=size)]})]
    for i, (img, fmt, kw) in enumerate(pictures):
        path = tmp_path / f"{i}.{fmt.lower()}"
        img.save(path, format=fmt, **kw)
        with Image.open(path) as a, Image.open(path) as b:
            frames = getattr(a, "n_frames", 1)
            for img in (a, b):  # decoded as inspect decodes them (RGB JPEGs as grey)
                prefer_grey(img, frames)
                img.load()
            fast, slow = hash_input(a, frames), to_model_mode(shrunk(b), 1)
            assert fast.mode == slow.mode == "L" and fast.size == slow.size, path
            assert fast.tobytes() == slow.tobytes(), path
            assert phash(fast) == phash(slow) == inspect(path)["phash"], path


def test_phash_products_match_the_uint8_form():
    """phash casts to float64 before the matrix products; the values must be those numpy gives
    for the uint8 pixels themselves (the form earlier manifests were written with)."""
    from stages.lib.modality.imagecore import _hash_matrix

    rng = np.random.default_rng(0)
    for h, w in ((1, 1), (8, 8), (48, 64), (65, 87), (129, 300), (300, 129)):
        x = rng.integers(0, 256, (h, w), dtype=np.uint8)
        a = _hash_matrix(h) @ x @ _hash_matrix(w).T
        b = _hash_matrix(h) @ x.astype(np.float64) @ _hash_matrix(w).T
        assert np.array_equal(a, b), (h, w)


def test_grey_jpeg_decode_fails_exactly_when_the_rgb_decode_fails():
    """inspect decodes RGB JPEGs as grey (prefer_grey). That must catch every file a full
    RGB decode rejects, and no other: truncations, overwritten bytes and cut-out runs of
    baseline, progressive and differently subsampled JPEGs."""
    import io
    import random
    import warnings

    from stages.lib.modality.imagecore import inspect
    from tests.corrupt import photo

    def rgb_error(data):
        try:
            with warnings.catch_warnings(), Image.open(io.BytesIO(data)) as img:
                warnings.simplefilter("ignore")
                img.load()
        except Exception:  # noqa: BLE001  any failure is a rejection, as in inspect
            return True
        return False

    sources = []
    for kw in ({}, {"progressive": True}, {"subsampling": 0}, {"subsampling": 2, "quality": 50}):
        buf = io.BytesIO()
        photo(3, size=96).save(buf, "JPEG", **kw)
        sources.append(buf.getvalue())
    rng, rejected = random.Random(0), 0
    for trial in range(600):
        data = bytearray(rng.choice(sources))
        if trial % 3 == 0:
            data = data[:rng.randrange(len(data))]
        elif trial % 3 == 1:
            for _ in range(rng.randrange(1, 20)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            i = rng.randrange(len(data))
            data = data[:i] + data[i + rng.randrange(1, 200):]
        facts = inspect(io.BytesIO(bytes(data)))
        assert bool(facts["error"]) == rgb_error(bytes(data)), (trial, facts)
        rejected += bool(facts["error"])
    assert 100 < rejected < 500  # both outcomes were exercised
