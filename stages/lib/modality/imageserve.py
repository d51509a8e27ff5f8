"""The image modality's guarded decode, for predict and serve: any file (a path or an upload)
becomes the model's input or a BadInput naming what is wrong, and nothing is decoded past the
pixel limit or, in serve, the decode budget.

The header is read first: an image whose width x height exceeds max_pixels is refused before
its pixels are decoded (a 50-byte PNG can declare 100k x 100k pixels); serve also weighs what
the decode will cost (decode_bytes) against its shared budget, and decodes a JPEG too costly at
full size at a reduced DCT scale (read_drafted). The decode itself is imagecore.py's own
(`load_image`), so predict and serve see what prepare stored.
"""
import os

import numpy as np

from stages.lib.modality.errors import BadInput, open_regular
from stages.lib.modality.imagegate import MAX_PIXELS


class Pixels(np.ndarray):
    """A model-input image that remembers its original (width, height): detection's boxes go
    back to the original pixels. Behaves as the plain uint8 array everywhere else."""

    source_size = None


def sized(pixels: np.ndarray, size) -> np.ndarray:
    """pixels (a decoded input) as a Pixels that remembers its source's (width, height)."""
    out = pixels.view(Pixels)
    out.source_size = (int(size[0]), int(size[1]))
    return out


def read(src, image_size: int, channels: int, max_pixels: int = MAX_PIXELS,
         letterbox=False) -> np.ndarray:
    """uint8 HxWxC from a path or a binary file object; raise BadInput naming what is wrong.

    The header is read first: an image whose width x height exceeds max_pixels is refused
    before its pixels are decoded (a 50-byte PNG can declare 100k x 100k pixels).
    """
    from PIL import Image, UnidentifiedImageError

    from stages.lib.modality.imagecore import load_image, open_header, upright_size

    if isinstance(src, (str, os.PathLike)):
        with open_regular(src) as f:
            return read(f, image_size, channels, max_pixels, letterbox)
    try:
        with open_header(src) as img:
            width, height = img.size
            upright = upright_size(img)
    except UnidentifiedImageError:
        raise BadInput("unsupported", "not an image Pillow can read") from None
    except Image.DecompressionBombError as exc:
        raise BadInput("too_large", f"image too large: {exc}") from None
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        raise BadInput("unreadable", f"cannot open: {type(exc).__name__}: {exc.strerror}") from None
    except (OSError, ValueError, SyntaxError) as exc:  # unreadable file, bad header fields
        message = f"cannot read image header: {type(exc).__name__}: {exc}"
        raise BadInput("corrupt", message) from None
    if width * height > max_pixels:
        raise too_large(width, height, max_pixels)
    if hasattr(src, "seek"):
        src.seek(0)
    try:
        return sized(load_image(src, image_size, channels, letterbox), upright)
    except Exception as exc:  # PIL raises many types on truncated or corrupt data
        message = f"cannot decode: {type(exc).__name__}: {exc}".replace("\n", " ")
        raise BadInput("corrupt", message) from None


def too_large(width: int, height: int, max_pixels: int) -> BadInput:
    """The refusal of an image over the pixel limit, naming the option that sets it (Pillow's
    own limit never applies: imagecore.open_header)."""
    return BadInput("too_large", f"image has {width}x{height} = {width * height} pixels, over "
                                 f"--max-pixels {max_pixels} (default: validate.max_pixels)")


HIGH_BIT_EXTRA = 26  # bytes per pixel to_model_mode's numpy scaling of 16/32-bit grey peaks at


def decode_bytes(mode: str, size: tuple, channels: int, image_size: int = 64) -> int:
    """About the most memory (bytes) decoding an image of this mode and size, converting it
    with to_model_mode and resizing it to image_size takes at once. Pillow keeps 1 byte per
    pixel for L/P/1, 2 for 16-bit, 4 for everything else (RGB as RGBX), and an 8-byte pointer
    per line in every copy; the conversion makes copies; the resize's first (horizontal) pass
    makes an image_size x height one. A 1 x 39,000,000 image costs 8 bytes per line per copy:
    over 1 GB for 39 MB of pixels."""
    width, height = size
    pixels = width * height
    stored = 1 if mode in ("1", "L", "P") else 2 if mode.startswith("I;16") else 4
    if mode in ("I", "F") or mode.startswith("I;16"):
        extra, copies = HIGH_BIT_EXTRA, 2
    elif mode in ("RGBA", "LA", "PA", "La", "RGBa", "P"):  # P: may carry transparency
        extra, copies = 4 + 4 + 1, 4
    elif mode == ("L" if channels == 1 else "RGB"):
        extra, copies = 0, 1
    elif mode in ("RGB", "L"):  # one conversion to the other
        extra, copies = (1 if channels == 1 else 4), 2
    else:  # CMYK, YCbCr, 1...: to RGB, then to L for grey
        extra, copies = 4 + 1, 3
    from stages.lib.modality.imagecore import input_hw

    resize = input_hw(image_size)[1] * height * 4 + height * 8
    return (pixels * (stored + extra) + copies * height * 8 + resize) * 5 // 4  # +25%: codecs


def read_header(src, channels: int, max_pixels: int, budget: int = 0, image_size: int = 64):
    """(decoded bytes, draft size or None) of an image, from its header alone; BadInput when
    it is over max_pixels or, with a budget (bytes), would decode to more. A JPEG over the
    budget is decoded at a reduced DCT scale (Pillow's draft: 1/2, 1/4 or 1/8) when that
    fits: the draft size returned."""
    from PIL import Image, UnidentifiedImageError

    from stages.lib.modality.imagecore import open_header

    try:
        with open_header(src) as img:
            width, height, mode, fmt = img.width, img.height, img.mode, img.format
    except UnidentifiedImageError:
        raise BadInput("unsupported", "not an image Pillow can read") from None
    except Image.DecompressionBombError as exc:
        raise BadInput("too_large", f"image too large: {exc}") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise BadInput("corrupt", f"cannot read image header: {type(exc).__name__}: "
                                  f"{exc}") from None
    finally:
        if hasattr(src, "seek"):
            src.seek(0)
    if width * height > max_pixels:
        raise too_large(width, height, max_pixels)
    cost = decode_bytes(mode, (width, height), channels, image_size)
    if not budget or cost <= budget:
        return cost, None
    if fmt == "JPEG":
        for k in (2, 4, 8):
            size = (-(-width // k), -(-height // k))
            reduced = decode_bytes(mode, size, channels, image_size)
            if reduced <= budget:
                return reduced, size
    raise BadInput("too_large", f"image of {width}x{height} {mode} pixels needs about "
                                f"{cost / 2**20:.0f} MiB to decode, over the decode budget of "
                                f"{budget / 2**20:.0f} MiB")


def read_drafted(src, image_size: int, channels: int, draft, letterbox=False) -> np.ndarray:
    """read's decode, with the JPEG decoded at the reduced scale read_header chose (draft: a
    size or None): uint8 HxWxC; BadInput when it fails."""
    from stages.lib.modality.imagecore import (fit, input_hw, load_image, open_header,
                                               to_model_mode, upright_size)

    try:
        with open_header(src) as img:  # read_header has checked the pixel count
            size = upright_size(img)
        if hasattr(src, "seek"):
            src.seek(0)
        if draft is None:
            return sized(load_image(src, image_size, channels, letterbox), size)
        with open_header(src) as img:
            img.draft("L" if channels == 1 else "RGB", draft)
            arr = fit(to_model_mode(img, channels), image_size, letterbox, size)
        return sized(arr.reshape(*input_hw(image_size), channels), size)
    except Exception as exc:  # PIL raises many types on truncated or corrupt data
        message = f"cannot decode: {type(exc).__name__}: {exc}".replace("\n", " ")
        raise BadInput("corrupt", message) from None
