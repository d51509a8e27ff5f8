"""The image modality's part of the data gate: validate's per-file checks of what ingest found
in each image (format, size, pixel count, mode, bit depth, transparency, frames, extension).

validate builds one table of every manifest row and runs great_expectations over it; this
module gives the image columns of that table (`check_columns`), the expectations over them
(`expectations`), each check's message (`reason`) and each check's kind and description
(`CHECKS`, which stages/lib/checks.py merges with the shared ones). Nothing is imported at the
top but the standard library: stages/lib/params.py reads MAX_PIXELS and FORMATS from here.
"""
from pathlib import Path

from stages.lib.checks import BLOCKING, WARNING
# validate.max_pixels' default, which predict and serve follow too: larger images are never
# decoded (a 50-byte PNG can declare 100k x 100k pixels)
MAX_PIXELS = 50_000_000
FORMATS = ["BMP", "GIF", "JPEG", "PNG", "PPM", "TIFF", "WEBP"]  # validate.formats: Pillow's names
EXTENSIONS = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".gif": "GIF", ".bmp": "BMP",
              ".tif": "TIFF", ".tiff": "TIFF", ".webp": "WEBP", ".pgm": "PPM", ".ppm": "PPM",
              ".pbm": "PPM"}

# {check: (kind, description)}, blocking first (checks.shared puts them in their places)
CHECKS = {
    "undecodable": (BLOCKING, "a full decode of every frame fails (truncated, random bytes, "
                              "text)"),
    "format": (BLOCKING, "a format not in validate.formats"),
    "too_small": (BLOCKING, "width or height below validate.min_side"),
    "too_large": (BLOCKING, "more pixels than validate.max_pixels (never decoded)"),
    "near_duplicate": (WARNING, "perceptual hashes within validate.near_dup_distance bits: "
                                "grouped with the nearest representative, in its split"),
    "mode": (WARNING, "CMYK, palette, 16-bit...: converted by the shared preprocessing"),
    "bit_depth": (WARNING, "more than 8 bits per sample: scaled to 8 bits"),
    "transparency": (WARNING, "an alpha channel: composited onto black"),
    "animated": (WARNING, "several frames: the first is used"),
    "extension": (WARNING, "content of another format than the extension says"),
}


def _num(v) -> int:
    return int(v) if str(v).strip() else 0


def check_columns(rows, ok, p) -> dict:
    """{column: one value per row} of validate's table; None where a check does not apply (a
    row with an ingest error: ok False)."""
    def each(value):
        return [value(r) if g else None for r, g in zip(rows, ok, strict=True)]

    return {
        "format": each(lambda r: r["format"]),
        "min_side": each(lambda r: min(_num(r["width"]), _num(r["height"]))),
        "pixels": [_num(r["width"]) * _num(r["height"]) if r["width"] else None for r in rows],
        "mode": each(lambda r: r["mode"]),
        "bits": each(lambda r: _num(r["bits"])),
        "alpha": each(lambda r: _num(r["alpha"])),
        "frames": each(lambda r: _num(r["frames"])),
        "ext_format": each(lambda r: EXTENSIONS.get(Path(r["path"]).suffix.lower())),
    }


def expectations(p) -> list:
    """[(check, great_expectations expectation)] over check_columns' columns (p: the validate
    params)."""
    import great_expectations as gx

    e = gx.expectations
    return [
        ("format", e.ExpectColumnValuesToBeInSet(column="format", value_set=p.formats)),
        ("too_small", e.ExpectColumnValuesToBeBetween(column="min_side", min_value=p.min_side)),
        ("too_large", e.ExpectColumnValuesToBeBetween(column="pixels", max_value=p.max_pixels)),
        ("mode", e.ExpectColumnValuesToBeInSet(column="mode", value_set=["L", "RGB"])),
        ("bit_depth", e.ExpectColumnValuesToBeBetween(column="bits", max_value=8)),
        ("transparency", e.ExpectColumnValuesToBeInSet(column="alpha", value_set=[0])),
        ("animated", e.ExpectColumnValuesToBeBetween(column="frames", max_value=1)),
        ("extension", e.ExpectColumnPairValuesToBeEqual(
            column_A="ext_format", column_B="format", ignore_row_if="either_value_is_missing")),
    ]


def reason(check: str, row: dict, p) -> str | None:
    """Why a manifest row fails one of the image checks; None for a check of another layer."""
    w, h = row["width"], row["height"]
    messages = {
        "format": lambda: f"unsupported format {row['format']} (validate.formats: "
                          f"{', '.join(p.formats)})",
        "too_small": lambda: f"too small: {w}x{h} (validate.min_side is {p.min_side})",
        "too_large": lambda: row["error"] or f"too large: {w}x{h} > validate.max_pixels "
                                             f"({p.max_pixels})",
        "mode": lambda: f"mode {row['mode']}: converted to grey/RGB by the shared preprocessing",
        "bit_depth": lambda: f"{row['bits']}-bit pixels: scaled to 8 bits by the shared "
                             f"preprocessing",
        "transparency": lambda: "transparency: composited onto black by the shared preprocessing",
        "animated": lambda: f"animated ({row['frames']} frames): the first frame is used",
        "extension": lambda: f"extension {Path(row['path']).suffix} but {row['format']} content "
                             f"(decoded by content)",
    }
    return messages[check]() if check in messages else None
