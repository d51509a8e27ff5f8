"""The image modality's core: the one definition of how a file becomes model input.

prepare, evaluate, export and predict all go through `load_image`/`decode` (decode, convert,
resize) and `normalize` (scale and standardise), so the model never sees pixels prepared two
ways. `to_model_mode` is the one conversion of odd modes (16-bit, CMYK, palette with
transparency, animated, EXIF-rotated) to grey or RGB; `inspect` is what ingest learns about a
file, refusing to decode anything whose header promises more than `max_pixels`; its perceptual
hash is the `fingerprint` validate and split compare. The modality's other parts build on this
one (stages/lib/modality/image.py lists them).
Only numpy and Pillow here: ONNX consumers can preprocess without torch.
"""
import functools
import threading
import warnings

import numpy as np
from PIL import Image, ImageOps

from stages.lib.modality.tensors import normalize_tensor  # noqa: F401 (INTERFACE)
from stages.lib.modality.errors import decode_error

ORIENTATION = 0x0112  # the EXIF tag
HIGH_BIT_MODES = {"I;16": 16, "I;16B": 16, "I;16L": 16, "I;16N": 16, "I": 32, "F": 32}
# the manifest columns inspect fills, in order; the error kinds it writes
FIELDS = ("format", "width", "height", "mode", "error_kind", "error", "frames", "bits", "alpha",
          "phash")
INSPECT_ERRORS = ("undecodable", "too_large")
PHASH_MIN_SIDE = 16  # below this a perceptual hash cannot tell a duplicate from a lookalike
GREY_MODES = {"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"}


def has_alpha(img) -> bool:
    return img.mode in ("RGBA", "LA", "PA", "La", "RGBa") or "transparency" in img.info


def grey_header(img) -> bool:
    """From an opened image's header: a grey mode, or a palette of grey colours only."""
    if img.mode in GREY_MODES:
        return True
    if img.mode in ("P", "PA"):
        pal = img.getpalette() or []
        return all(pal[i] == pal[i + 1] == pal[i + 2] for i in range(0, len(pal) - 2, 3))
    return False


_LIFTED = threading.Lock()  # serve opens from several threads: one lifts the limit at a time


def open_header(path):
    """Image.open that reads only the header, even past Pillow's own bomb limit: the caller
    compares width x height with its own limit (validate.max_pixels, --max-pixels) before
    anything is decoded, so Pillow's 178,956,970 pixels never decide and never name the
    refusal. (The limit is lifted for the open alone, under a lock so that threads restore it
    in order: cheaper than catching the warning for every file.)"""
    with _LIFTED:
        limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
        try:
            return Image.open(path)
        finally:
            Image.MAX_IMAGE_PIXELS = limit


def inspect(path, max_pixels: int = 0, with_phash: bool = True) -> dict:
    """What a full decode of a file (path or binary file object) finds; `error` is empty when
    every frame decodes.

    Width and height come from the header; when they exceed `max_pixels` (0 = no limit) the
    file is a decompression bomb and is never decoded. `phash` (16 hex digits, imagehash's
    perceptual hash of the converted first frame) lets validate and split find near-duplicates.
    """
    facts = {"format": "", "width": 0, "height": 0, "mode": "", "error_kind": "", "error": "",
             "frames": 0, "bits": 0, "alpha": 0, "phash": ""}  # FIELDS, in order
    def why(exc):  # the file's name only, no repr: outs never hold absolute paths or addresses
        return f"cannot decode: {decode_error(exc, path)}"

    try:
        img = open_header(path)
    except Exception as exc:  # PIL raises many types; every one means "not a usable image"
        facts.update(error_kind="undecodable", error=why(exc))
        return facts
    with img:
        facts.update(format=img.format or "", width=img.width, height=img.height, mode=img.mode,
                     frames=getattr(img, "n_frames", 1), alpha=int(has_alpha(img)),
                     bits=HIGH_BIT_MODES.get(img.mode, 1 if img.mode == "1" else 8))
        if max_pixels and img.width * img.height > max_pixels:
            facts["error_kind"] = "too_large"
            facts["error"] = (f"too large: {img.width}x{img.height} = {img.width * img.height} "
                              f"pixels > validate.max_pixels ({max_pixels}); a possible "
                              f"decompression bomb, not decoded")
            return facts
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prefer_grey(img, facts["frames"])
                for frame in range(facts["frames"]):  # a truncated later frame is broken too
                    img.seek(frame)
                    img.load()  # a header check is not enough: truncated files fail only here
                img.seek(0)
                if with_phash:
                    facts["phash"] = phash(hash_input(img, facts["frames"]))
        except Exception as exc:
            facts.update(error_kind="undecodable", error=why(exc))
    return facts


def prefer_grey(img, frames: int = 1) -> None:
    """Before loading: ask the decoder of a one-frame RGB JPEG for grey, at full size.

    libjpeg still entropy-decodes every component of every scan, so a truncated or corrupt file
    fails exactly as in an RGB decode (tests/test_modality_image.py checks thousands of
    corruptions); it skips the chroma IDCT, upsampling and colour conversion, about 40% of the
    decode, and phash wants grey anyway. The grey is the JPEG's own luma (Y), not Pillow's RGB->L.
    """
    if frames == 1 and img.format == "JPEG" and img.mode == "RGB":
        img.draft("L", None)  # None: no DCT scaling, every pixel


def hash_input(img, frames: int = 1):
    """`to_model_mode(shrunk(img), 1)`, the grey picture phash sees, with the common case (one
    upright frame of L or RGB, no transparency) without to_model_mode's checks and copies."""
    if (frames == 1 and img.mode in ("L", "RGB") and "transparency" not in img.info
            and img.getexif().get(ORIENTATION, 1) == 1):
        small = shrunk(img)
        return small if small.mode == "L" else small.convert("L")
    return to_model_mode(shrunk(img), 1)


def _dct_rows(n: int = 32, keep: int = 8) -> np.ndarray:
    k, x = np.arange(keep)[:, None], np.arange(n)[None, :]
    return 2.0 * np.cos(np.pi * k * (2 * x + 1) / (2 * n))  # DCT-II, as scipy's default


DCT8 = _dct_rows()


@functools.lru_cache(maxsize=64)
def _hash_matrix(n: int) -> np.ndarray:
    """8 x n: area-average n pixels down (or up) to 32, then the 8 lowest DCT-II frequencies."""
    edges = np.linspace(0, n, 33)
    pixels = np.arange(n + 1)
    overlap = (np.minimum(edges[1:, None], pixels[None, 1:])
               - np.maximum(edges[:-1, None], pixels[None, :-1])).clip(min=0)
    return DCT8 @ (overlap / overlap.sum(axis=1, keepdims=True))


def shrunk(img, side: int = 64):
    """A box-filtered reduction to about `side` pixels for hashing, of the grey picture when
    the image is RGB without transparency (a grey reduction costs a third of an RGB one).
    Unchanged when orientation matters or the mode is not L or RGB."""
    factor = min(img.size) // side
    if factor < 2 or img.mode not in ("L", "RGB") or img.getexif().get(ORIENTATION, 1) != 1:
        return img
    if img.mode == "RGB" and not has_alpha(img):
        img = img.convert("L")
    return img.reduce(factor)


def phash(img) -> str:
    """A perceptual hash (16 hex digits): the image in grey, area-averaged to 32x32, its 2-D
    DCT-II, and the 8x8 lowest frequencies compared with their median: imagehash.phash's
    algorithm with its Lanczos resize replaced by an area average done as two small matrix
    products (precomputed per image size), so hashing costs far less than decoding."""
    grey = img if img.mode == "L" else img.convert("L")
    x = np.frombuffer(grey.tobytes(), np.uint8).reshape(grey.height, grey.width)
    # float64 before the product (as numpy casts it anyway), so the product runs as one BLAS
    # call; the values are the same.
    low = (_hash_matrix(grey.height) @ x.astype(np.float64) @ _hash_matrix(grey.width).T).ravel()
    middle = sorted(low.tolist())
    median = (middle[31] + middle[32]) / 2  # np.median's value, without its overhead
    return np.packbits(low > median).tobytes().hex()


def fingerprint(row) -> int | None:
    """A manifest row's perceptual hash as a 64-bit int (Hamming distance: how alike two images
    look), or None when it is not used: no hash, an error, or a side under PHASH_MIN_SIDE."""
    if row.get("phash") and not row.get("error") and min(
            int(row["width"]), int(row["height"])) >= PHASH_MIN_SIDE:
        return int(row["phash"], 16)
    return None


def to_model_mode(img, channels: int):
    """Convert any decoded image to "L" (channels 1) or "RGB" (channels 3), one way for all.

    - EXIF orientation is applied, so pixels are upright as a viewer shows them.
    - Animated images: the first frame.
    - 16/32-bit grey (I;16, I, F): scaled to 8 bits by value (>> 8 for 16-bit), not clipped.
    - Transparency (RGBA, LA, palette with a transparent index): composited onto black.
    - CMYK, YCbCr, palette and the rest: Pillow's conversion to RGB, then to L if grey.
    """
    if getattr(img, "n_frames", 1) > 1:
        img.seek(0)
    if img.getexif().get(ORIENTATION, 1) != 1:  # only then: transposing copies the image
        img = ImageOps.exif_transpose(img)
    if img.mode in HIGH_BIT_MODES:
        arr = np.asarray(img)
        if img.mode == "F":
            arr = np.clip(arr, 0.0, 1.0) * 255.0 if arr.max(initial=0) <= 1.0 else arr
        else:
            arr = np.clip(arr.astype(np.int64), 0, 65535) >> 8
        img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "L")
    elif has_alpha(img):
        rgba = img.convert("RGBA")
        img = Image.new("RGB", rgba.size, (0, 0, 0))
        img.paste(rgba, mask=rgba.getchannel("A"))
    if channels == 1:
        return img if img.mode == "L" else img.convert(
            "L" if img.mode == "RGB" else "RGB").convert("L")
    return img if img.mode == "RGB" else img.convert("RGB")


def input_hw(image_size) -> tuple[int, int]:
    """(height, width) of the model input: image_size is a side (square images) or, for text
    lines (prepare.height), [height, width]."""
    if isinstance(image_size, (list, tuple)):
        return int(image_size[0]), int(image_size[1])
    return int(image_size), int(image_size)


def input_shape(image_size, channels: int) -> tuple:
    """One stored sample's shape, (height, width, channels): shards hold uint8 N x H x W x C."""
    return (*input_hw(image_size), channels)


def input_spec(meta: dict) -> tuple:
    """One model input's shape, (channels, height, width), from meta's image_size and
    channels (data/processed/meta.json, a model's metadata)."""
    return (meta["channels"], *input_hw(meta["image_size"]))


def warmup_input(image_size, channels: int) -> np.ndarray:
    """A stored sample the model can run on before any request (serve's first inference):
    black, uint8 H x W x C."""
    return np.zeros(input_shape(image_size, channels), dtype=np.uint8)


def line_width(size, image_size) -> int:
    """The width (px) a w x h image takes in a line input (image_size [height, width]) before
    fit pads it: scaled to the height with its aspect kept, at most the width."""
    height, width = input_hw(image_size)
    w, h = size
    return min(max(1, round(w * height / max(h, 1))), width)


def bucket_of(scaled: int, buckets) -> int:
    """The smallest of the ascending widths `buckets` that holds a line `scaled` px wide (the
    last when none does)."""
    return next((b for b in buckets if b >= scaled), buckets[-1])


def line_buckets(sizes, image_size, width_buckets) -> np.ndarray:
    """uint16 bucket width of each line from its header size (width, height): the smallest
    bucket holding the line as fit scales it (fit pads the rest of the record with the pad
    value, so the record cut at its bucket is exactly the line fitted to that width)."""
    return np.array([bucket_of(line_width(size, image_size), width_buckets) for size in sizes],
                    dtype=np.uint16)


def bucket_width(image_size, width_buckets, source_size) -> int:
    """The input width an image of source_size (w, h) runs at: the smallest of width_buckets
    that holds it scaled to the input's height (as fit scales it), else the largest bucket;
    the input's own width when there are no buckets or no size."""
    if not width_buckets or source_size is None:
        return input_hw(image_size)[1]
    return bucket_of(line_width(source_size, image_size), width_buckets)


LETTERBOX_FILL = 114  # the grey a letterboxed input is padded with (YOLO's), every channel
# what meta.json, model.pt and the ONNX metadata record for a letterboxed input (False: squash)
LETTERBOX = {"fill": LETTERBOX_FILL, "align": "center"}


def upright_size(img) -> tuple[int, int]:
    """(width, height) of an opened image as to_model_mode turns it: an EXIF orientation of 5
    to 8 (a quarter turn) swaps the header's width and height."""
    w, h = img.size
    return (h, w) if img.getexif().get(ORIENTATION, 1) in (5, 6, 7, 8) else (w, h)


def letterbox_geometry(size, side: int) -> tuple[int, int, int, int]:
    """(left, top, width, height) of a w x h image letterboxed into a side x side input: its
    longer side scaled to `side`, aspect kept (each side rounded, at least 1 px), centred (the
    odd pixel of padding goes right or below). A point (x, y) of the image lands at
    (left + x * width / w, top + y * height / h): Pillow's resize maps pixel edges exactly so.
    A square image fills the input: (0, 0, side, side), the squash resize's own geometry."""
    w, h = size
    scale = side / max(w, h)
    nw = side if w >= h else min(side, max(1, round(w * scale)))
    nh = side if h >= w else min(side, max(1, round(h * scale)))
    return (side - nw) // 2, (side - nh) // 2, nw, nh


def fit(img, image_size, letterbox=False, size=None):
    """The converted image resized to the model input: a square (squashed, or with letterbox
    its aspect kept and padded with LETTERBOX_FILL around it: letterbox_geometry), or a line
    (image_size [height, width]) scaled to the height with its aspect kept, squeezed to the
    width when wider, right-padded when narrower with the median of its border pixels (the
    paper). size: the (w, h) the letterbox's geometry follows when img is a reduced decode
    of a larger picture (a JPEG draft); img.size otherwise."""
    if not isinstance(image_size, (list, tuple)):
        size = size or img.size
        if not letterbox or size[0] == size[1]:  # a square letterboxes to the squash
            return np.asarray(img.resize((image_size, image_size), Image.Resampling.BILINEAR),
                              dtype=np.uint8)
        left, top, nw, nh = letterbox_geometry(size, image_size)
        arr = np.asarray(img.resize((nw, nh), Image.Resampling.BILINEAR), dtype=np.uint8)
        out = np.full((image_size, image_size, *arr.shape[2:]), LETTERBOX_FILL, np.uint8)
        out[top:top + nh, left:left + nw] = arr
        return out
    height, width = input_hw(image_size)
    scaled = line_width(img.size, image_size)
    arr = np.asarray(img.resize((scaled, height), Image.Resampling.BILINEAR), dtype=np.uint8)
    if scaled == width:
        return arr
    grid = arr.reshape(height, scaled, -1)
    border = np.concatenate([grid[0], grid[-1], grid[:, 0], grid[:, -1]])
    paper = np.median(border, axis=0).round().astype(np.uint8)
    out = np.empty((height, width, grid.shape[2]), dtype=np.uint8)
    out[:] = paper
    out[:, :scaled] = grid
    return out.reshape((height, width, *arr.shape[2:]))


def load_image(path, image_size, channels: int, letterbox=False) -> np.ndarray:
    """Decode, convert to grey or RGB, and resize (fit) to the model input: uint8 HxWxC. The
    caller has checked the pixel count (validate, read): Pillow's own limit is not applied."""
    with open_header(path) as img:
        return model_input(img, image_size, channels, letterbox)


def model_input(img, image_size, channels: int, letterbox=False) -> np.ndarray:
    """An opened image converted and resized (fit) to the model input: uint8 HxWxC."""
    return fit(to_model_mode(img, channels), image_size, letterbox).reshape(
        *input_hw(image_size), channels)


def decode(path, image_size, channels: int, letterbox=False, facts=None, sizes=None):
    """(the model input of one file, uint8 HxWxC; its upright (width, height) before the
    resize, which a letterbox's geometry needs), as load_image decodes it, from one open of the
    file. facts: a list that gets the header's (shorter side, grey); sizes: a list that gets
    its header (width, height)."""
    with open_header(path) as img:  # validate has refused what is over validate.max_pixels
        if facts is not None:
            facts.append((min(img.size), grey_header(img)))
        if sizes is not None:
            sizes.append(img.size)
        size = upright_size(img)
        return model_input(img, image_size, channels, letterbox), size


def normalize(batch: np.ndarray, mean, std) -> np.ndarray:
    """uint8 NxHxWxC -> float32 NxCxHxW, scaled to [0, 1] then standardised per channel:
    ((x / 255) - mean) / std in float32, element by element. Transposed as it is cast, then
    in place, per channel plane: the same operations on each element as the three-pass form
    on NxHxWxC (so the same bits), at a sixth of its time (whose every pass broadcast over an
    innermost axis of 3: at 32 px RGB, 1.2 ms of a 49 ms small_cnn step)."""
    n, h, w, c = batch.shape
    x = np.empty((n, c, h, w), dtype=np.float32)
    np.copyto(x, batch.transpose(0, 3, 1, 2), casting="unsafe")
    plane = (1, -1, 1, 1)
    np.divide(x, np.float32(255.0), out=x)
    np.subtract(x, np.asarray(mean, dtype=np.float32).reshape(plane), out=x)
    np.divide(x, np.asarray(std, dtype=np.float32).reshape(plane), out=x)
    # one channel: the three-pass form's strides too (numpy found its transposed view already
    # contiguous, so it was not copied): torch takes an N x 1 x H x W tensor with a channel
    # stride of 1 for channels-last, and its convolutions then give other bits
    return x.reshape(n, h, w, 1).transpose(0, 3, 1, 2) if c == 1 else x


def thumbnail(ax, sample) -> None:
    """One stored sample (uint8 HxWxC) drawn on a matplotlib axis as the model saw it, grey or
    colour, pixel for pixel (the reports' and plots' pictures)."""
    grey = sample.shape[-1] == 1
    ax.imshow(sample[..., 0] if grey else sample, cmap="gray" if grey else None, vmin=0,
              vmax=255, interpolation="nearest")
