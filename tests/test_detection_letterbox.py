"""prepare.letterbox (issue 18): a non-square image keeps its aspect, padded with grey 114,
and its boxes move with the pixels exactly, into prepare's targets and back out of predict's
rows in the original image's pixels; a square image (the built-in sample) prepares to the
same bytes as the squash resize. Real image files, drawn at known pixels."""
import json

import numpy as np
import pytest
from PIL import Image

from stages.lib.modality.imagecore import LETTERBOX, LETTERBOX_FILL, letterbox_geometry
from stages.prepare_jobs import prepare_split
from stages.tasks.detection import TASK
from stages.tasks.detection.boxes import to_original

SIDE = 64
BACKGROUND, INK = 30, 250


def draw(path, size, box, exif_orientation=0):
    """A real PNG of size (w, h): dark, with a bright rectangle at box (x1, y1, x2, y2) in the
    upright picture. exif_orientation 6: stored turned a quarter, with the EXIF tag that turns
    it back (a phone photo), so the file's header size is (h, w)."""
    w, h = size
    x1, y1, x2, y2 = box
    arr = np.full((h, w, 3), BACKGROUND, np.uint8)
    arr[y1:y2, x1:x2] = INK
    img = Image.fromarray(arr)
    if exif_orientation == 6:
        exif = Image.Exif()
        exif[0x0112] = 6
        img.transpose(Image.Transpose.ROTATE_90).save(path, exif=exif)
    else:
        img.save(path)
    return path


def row(path, size, box, label="square"):
    """The manifest row of the image: its YOLO box (normalised to the upright picture)."""
    w, h = size
    x1, y1, x2, y2 = box
    return {"path": path.name, "boxes": json.dumps(
        [[1, label, (x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h]])}


def encoder(letterbox):
    meta = {"classes": ["circle", "square"], "max_boxes": 2,
            **({"letterbox": LETTERBOX} if letterbox else {})}
    return TASK.encoder(meta)


def prepared(path, r, letterbox=True):
    spec = TASK.modality.stored(SIDE, 3, letterbox)
    x, y = prepare_split([r], path.parent, encoder(letterbox), "float32", spec, sized=True,
                         modality=TASK.modality)
    return x[0], y[0]


def ink_extent(pixels):
    """(x1, y1, x2, y2) of the bright pixels (half-way between ink and background)."""
    ys, xs = np.nonzero(pixels.mean(axis=2) > (BACKGROUND + INK) / 2)
    return xs.min(), ys.min(), xs.max() + 1, ys.max() + 1


@pytest.mark.parametrize("size,box,orientation", [
    ((200, 100), (40, 30, 80, 70), 0),  # wide: padded above and below
    ((90, 210), (10, 120, 70, 190), 0),  # tall: padded left and right
    ((150, 60), (100, 5, 140, 50), 6),  # EXIF-rotated: the header says 60 x 150
])
def test_boxes_move_with_the_letterboxed_pixels(tmp_path, size, box, orientation):
    path = draw(tmp_path / "a.png", size, box, orientation)
    x, y = prepared(path, row(path, size, box))
    left, top, nw, nh = letterbox_geometry(size, SIDE)
    assert max(nw, nh) == SIDE and abs(nw / nh - size[0] / size[1]) < 0.05  # aspect kept
    pad = np.ones(x.shape[:2], bool)
    pad[top:top + nh, left:left + nw] = False
    assert pad.any() and (x[pad] == LETTERBOX_FILL).all()  # grey around, centred
    assert abs(left - (SIDE - nw - left)) <= 1 and abs(top - (SIDE - nh - top)) <= 1
    assert y[0, 0] == 1 and (y[1] == -1).all()  # class "square", then padding
    # the target box is where the resize put the bright rectangle (its blurred edge: 1 px)
    assert np.abs(np.array(ink_extent(x)) - y[0, 1:]).max() <= 1.0
    # and back in the original picture's pixels: where it was drawn
    back = to_original(np.array([[*y[0, 1:], 0.9, 1]]), SIDE, size, LETTERBOX)
    assert np.abs(back[0, :4] - box).max() <= 1e-3


def test_predict_reads_the_same_pixels_and_maps_boxes_back(tmp_path):
    """tools.predict's reader gives prepare's letterboxed pixels and the upright size; the
    decode predict and serve share (Detection.decode) turns a detection at the target box
    into the drawn box in the original pixels."""
    from stages.lib.modality.imageserve import read as read_image

    size, box = (240, 90), (150, 20, 230, 80)
    path = draw(tmp_path / "wide.png", size, box)
    x, y = prepared(path, row(path, size, box))
    seen = read_image(path, SIDE, 3, letterbox=LETTERBOX)
    assert seen.source_size == size and np.array_equal(np.asarray(seen), x)
    outputs = np.zeros((1, 4, 6), np.float32)
    outputs[0, 0] = [*y[0, 1:], 0.9, 1]
    meta = {"classes": ["circle", "square"], "image_size": SIDE, "letterbox": LETTERBOX,
            "source_sizes": [size], "score_threshold": 0.5}
    (pred,) = TASK.decode(outputs, meta, 1)
    (found,) = pred["boxes"]
    assert found["label"] == "square" and found["score"] == pytest.approx(0.9)
    assert np.abs(np.array([found[k] for k in ("x1", "y1", "x2", "y2")]) - box).max() <= 1.0
    squashed = TASK.decode(outputs, {**meta, "letterbox": False}, 1)[0]["boxes"][0]
    assert abs(squashed["y1"] - box[1]) > 5  # without the letterbox's geometry: off


def test_square_images_prepare_to_the_squash_bytes(tmp_path):
    """The built-in sample is square: letterboxed, its pixels and targets are the squash
    resize's, byte for byte (at the sample's 160 px and at a smaller input)."""
    from stages.tasks.detection.sample import shapes

    sample = dict(shapes(12))
    images = sorted(rel for rel in sample if rel.endswith(".png"))[:6]
    assert len(images) == 6
    for rel in images:
        path = tmp_path / rel.replace("/", "_")
        path.write_bytes(sample[rel])
        label = sample[rel.replace("images/", "labels/")[:-4] + ".txt"].decode()
        boxes = [[n, "square", *map(float, line.split()[1:])]
                 for n, line in enumerate(label.splitlines(), 1)][:2]
        r = {"path": path.name, "boxes": json.dumps(boxes)}
        for side in (160, SIDE):
            stored = TASK.modality.stored
            a = prepare_split([r], tmp_path, encoder(True), "float32", stored(side, 3, True),
                              sized=True, modality=TASK.modality)
            b = prepare_split([r], tmp_path, encoder(False), "float32", stored(side, 3),
                              modality=TASK.modality)
            assert a[0].tobytes() == b[0].tobytes() and a[1].tobytes() == b[1].tobytes()


def test_letterbox_param_resolves_per_task(tmp_path):
    from stages.lib.io import StageError
    from stages.lib.params import Prepare
    from stages.prepare import resolve_letterbox
    from stages.tasks import get

    assert resolve_letterbox(Prepare(), get("detection")) is True
    assert resolve_letterbox(Prepare(), get("classification")) is False
    assert resolve_letterbox(Prepare(letterbox=False), get("detection")) is False
    with pytest.raises(StageError, match="prepare.letterbox"):
        resolve_letterbox(Prepare(letterbox=True), get("segmentation"))
    assert Prepare(letterbox="maybe").problems()


def test_export_threshold_defaults_to_evaluate(tmp_path):
    import yaml

    from stages.lib.params import load_all
    from stages.tasks.detection import export_threshold

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"task": "detection", "evaluate": {"score_threshold": 0.4}}))
    assert export_threshold(load_all(path)) == 0.4
    path.write_text(yaml.safe_dump({"task": "detection", "evaluate": {"score_threshold": 0.4},
                                    "export": {"score_threshold": 0.25}}))
    assert export_threshold(load_all(path)) == 0.25
    assert TASK.export_metadata(load_all(path))["score_threshold"] == 0.25


def test_a_drafted_jpeg_letterboxes_with_the_original_geometry(tmp_path):
    """serve decodes a JPEG over its memory budget at a reduced DCT scale: 901 x 401 at 1/4 is
    226 x 101, whose own letterbox is 64 x 29 at row 17; the original's is 64 x 28 at row 18.
    The drafted input follows the original's geometry (where predict's boxes go back through),
    its box within 1 px of the full decode's."""
    from stages.lib.modality.imagecore import load_image
    from stages.lib.modality.imageserve import read_drafted

    for size in ((901, 401), (345, 902)):
        w, h = size
        box = (w // 4, h // 4, w // 2, h // 2)
        arr = np.full((h, w, 3), BACKGROUND, np.uint8)
        arr[box[1]:box[3], box[0]:box[2]] = INK
        path = tmp_path / f"{w}x{h}.jpg"
        Image.fromarray(arr).save(path, quality=95)
        full = load_image(path, SIDE, 3, LETTERBOX)
        drafted = read_drafted(path, SIDE, 3, (-(-w // 4), -(-h // 4)), LETTERBOX)
        assert drafted.source_size == size
        left, top, nw, nh = letterbox_geometry(size, SIDE)
        pad = np.ones((SIDE, SIDE), bool)
        pad[top:top + nh, left:left + nw] = False
        assert (np.asarray(drafted)[pad] == LETTERBOX_FILL).all()
        assert not (np.asarray(drafted)[~pad] == LETTERBOX_FILL).all(axis=-1).any()
        assert np.abs(np.array(ink_extent(drafted)) - ink_extent(full)).max() <= 1
