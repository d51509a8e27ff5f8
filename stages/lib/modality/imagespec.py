"""The image modality's input spec: how an image file becomes model input, from prepare to serve.

An image is decoded (Pillow), converted to `channels` (1 grey, 3 RGB), resized to `size`
(pixels per side, or [height, width] for text lines, each line at the smallest of
`width_buckets` that holds it), squashed or letterboxed (`letterbox`: {"fill", "align"} or
False), then normalised with mean and std per channel (stages/lib/modality/imagecore.py). The
project's params.yaml holds it as prepare.image_size (or height and width), channels, mean,
std, letterbox and width_buckets; meta.json and a model's metadata store it under the
recipe's keys (stages/lib/modality/spec.py). Its input limit is in pixels:
validate.max_pixels (ingest), --max-pixels (predict, serve).
"""
from dataclasses import dataclass, field

from stages.lib.modality.spec import LETTERBOX, SIZE

LIMIT = "validate.max_pixels"  # the params key of the input limit ingest passes to inspect


@dataclass(frozen=True)
class ImageSpec:
    """An image model's input: its size, channels, letterbox, normalisation and the width
    buckets of a text-line model."""

    size: object = 64  # pixels per side, or [height, width]
    channels: int = 1
    letterbox: object = False
    mean: tuple = (0.5,)
    std: tuple = (0.5,)
    width_buckets: tuple = field(default=())

    @classmethod
    def from_meta(cls, meta) -> "ImageSpec":
        """The spec stored in meta.json or a model's metadata (or a loaded model's values)."""
        return cls(meta[SIZE], int(meta["channels"]), meta.get(LETTERBOX) or False,
                   tuple(meta.get("mean") or (0.5,)), tuple(meta.get("std") or (0.5,)),
                   tuple(meta.get("width_buckets") or ()))

    @property
    def shape(self) -> tuple:
        """One stored sample's shape, (height, width, channels)."""
        from stages.lib.modality.imagecore import input_shape

        return input_shape(self.size, self.channels)


def stored(size, channels: int, letterbox=False) -> ImageSpec:
    """The spec of prepare's resolved size, channels and letterbox (mean and std are not
    needed to decode)."""
    return ImageSpec(size, channels, letterbox)


def input_shape(spec) -> tuple:
    return spec.shape


def warmup_input(spec):
    """A stored sample the model can run on before any request: black, uint8 H x W x C."""
    from stages.lib.modality.imagecore import warmup_input as black

    return black(spec.size, spec.channels)


HEADER_UNREAD = object()  # read's draft when no read_header came first (predict)


def decode(path, spec, facts=None, sizes=None):
    """imagecore.decode of one file as spec says (size, channels, letterbox)."""
    from stages.lib.modality.imagecore import decode as decode_file

    return decode_file(path, spec.size, spec.channels, spec.letterbox, facts, sizes)


def read(src, spec, limit: int = 0, draft=HEADER_UNREAD):
    """imageserve.read (the guarded decode) of one input as spec says; limit: the most pixels
    (0: the modality's default, MAX_PIXELS). draft, when read_header has read this input's
    header (serve): what it chose, a reduced decode (a JPEG decoded at a reduced scale) or None,
    and the pixels are decoded without reading the header's limits again
    (imageserve.read_drafted)."""
    from stages.lib.modality.imagegate import MAX_PIXELS
    from stages.lib.modality.imageserve import read as read_image
    from stages.lib.modality.imageserve import read_drafted

    if draft is not HEADER_UNREAD:
        return read_drafted(src, spec.size, spec.channels, draft, spec.letterbox)
    return read_image(src, spec.size, spec.channels, limit or MAX_PIXELS, spec.letterbox)


def read_header(src, spec, limit: int = 0, budget: int = 0):
    """imageserve.read_header: (decode bytes, draft size or None) from the header alone."""
    from stages.lib.modality.imagegate import MAX_PIXELS
    from stages.lib.modality.imageserve import read_header as header_cost

    return header_cost(src, spec.channels, limit or MAX_PIXELS, budget, spec.size)
