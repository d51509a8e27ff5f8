"""Synthetic text lines from the user's font files (tools.synth_ocr): the layout data.source
reads (a `lines.jsonl` list beside `images/`), with the font of every line in the list.

Each line i is drawn by a numpy PCG64 generator seeded by (seed, i): its font is
fonts[i % len(fonts)] (the fonts sorted by relative path, so every font gets the same share and
`--holdout` fonts are whole), then 1-`words` words from the word list (cut to `max_chars`,
characters outside `charset` dropped from the list beforehand), a font size, tracking (extra
space between characters), a per-character baseline jitter, an italic shear (with probability
`shear_p`), ink and paper grey levels, a Gaussian blur and Gaussian noise. The glyphs are
rasterised by Pillow's FreeType with the BASIC layout (no raqm, no shaping library), one
character at a time at its advance plus the tracking, into an 8-bit coverage mask; the rest is
numpy elementwise arithmetic, then the line is resized to `height` (Pillow's LANCZOS) and
written as PNG at a fixed compression level. The same font files with the same Pillow (and its
bundled FreeType and zlib) give the same bytes; tests/test_ocr_synth.py runs it twice and
compares hashes, and pins a hash for a DejaVu font matplotlib ships.
"""
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

LIST = "lines.jsonl"
FONT_SUFFIXES = (".ttf", ".otf", ".ttc", ".pfb")
# The file that marks a folder synth_ocr wrote (hidden: ingest does not list it). An existing
# --out is replaced only when it holds this file: never a folder someone else made.
MARKER = ".synth_ocr"
MARKER_TEXT = "written by tools.synth_ocr: its next run with this --out replaces this folder\n"
MAX_WORDS_BYTES = 64 * 2**20  # --words: the largest word list read
MAX_LINES = 1_000_000  # --lines: at most
MAX_DRAWS = 20  # draws of one line before synth_ocr gives up on the aspect gate


@dataclass(frozen=True)
class Style:
    """The draws' ranges (the defaults resemble scanned or photographed print)."""
    height: int = 32  # the written line height in pixels
    size: tuple = (28, 44)  # font size in pixels (rendered, then scaled to `height`)
    tracking: tuple = (-0.02, 0.12)  # extra space per character, in font sizes
    jitter: float = 0.03  # baseline jitter: standard deviation in font sizes
    shear_p: float = 0.2  # probability of an italic shear
    shear: float = 0.25  # its largest tangent (either side)
    paper: tuple = (170, 255)  # paper grey level
    contrast: int = 80  # ink is at least this much darker than the paper
    blur: tuple = (0.0, 1.2)  # Gaussian blur radius at the rendered size
    noise: tuple = (0.0, 8.0)  # Gaussian noise standard deviation, grey levels
    words: int = 3  # words per line, at most
    max_chars: int = 24  # characters per line, at most
    # The crop of the line box (docs/ocr.md). text_height: the font size as a fraction of the
    # line height, drawn from this range (0.55: a loose crop, 1.1: a detector's tight box that
    # may clip descenders); None: the font's own box (ascent + descent) with size/4 above and
    # below, about 0.6. offset: the text's centre moved by this share of the line height (with
    # text_height). margin: each side's space beyond the ink, in line heights (with
    # text_height; None: size/4). Their draws come after every other draw, and None draws
    # nothing: a style without them writes the bytes it always wrote.
    text_height: tuple | None = None
    offset: tuple = (0.0, 0.0)
    margin: tuple | None = None


# crop tightness of a line, by its drawn text_height (the font size over the line height):
# below the first bound loose, below the second medium, else tight
TIGHTNESS = ((0.7, "loose"), (0.9, "medium"), (float("inf"), "tight"))


def tightness(text_height: float) -> str:
    return next(name for bound, name in TIGHTNESS if text_height < bound)


def check_style(style: Style) -> Style:
    """style, or a ValueError naming the option (tools.synth_ocr's flag) out of range."""
    ranges = (("--text-height", style.text_height, 0.2, 2.0),
              ("--offset", style.offset, -0.5, 0.5), ("--margin", style.margin, 0.0, 4.0))
    for flag, r, lo, hi in ranges:
        if r is not None and not (len(r) == 2 and lo <= r[0] <= r[1] <= hi):
            raise ValueError(f"{flag} {' '.join(map(str, r))}: give LOW HIGH with "
                             f"{lo} <= LOW <= HIGH <= {hi}")
    if style.text_height is None and (style.offset != (0.0, 0.0) or style.margin is not None):
        raise ValueError("--offset/--margin place the text in a line box of --text-height: "
                         "give --text-height LOW HIGH too (0.55 1.1: loose to tight crops)")
    return style


def find_fonts(folder: Path) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"--fonts {folder}: not a folder; give a folder of .ttf/.otf files")
    fonts = sorted((p for p in folder.rglob("*") if p.suffix.lower() in FONT_SUFFIXES
                    and p.is_file()), key=lambda p: p.relative_to(folder).as_posix())
    if not fonts:
        raise ValueError(f"--fonts {folder}: no font file ({', '.join(FONT_SUFFIXES)}) in it")
    return fonts


def read_words(path: Path, charset: str = "") -> list[str]:
    """The word list (whitespace-separated tokens of a UTF-8 file, in order, repeats kept),
    without the words holding a character outside `charset` (when given)."""
    from stages.lib import safefs

    try:
        with safefs.open_regular(path) as f:  # a FIFO or device is never read from
            data = f.read(MAX_WORDS_BYTES + 1)
    except safefs.NotRegular as exc:
        raise ValueError(f"--words {path}: {safefs.mode_text(exc.mode)}, not a regular file; "
                         f"give a UTF-8 text file") from None
    except OSError as exc:
        raise ValueError(f"--words {path}: cannot read ({exc.strerror}); give a UTF-8 text "
                         f"file") from None
    if len(data) > MAX_WORDS_BYTES:
        raise ValueError(f"--words {path}: over {MAX_WORDS_BYTES // 2**20} MiB; give a shorter "
                         f"word list (a sample of the corpus)")
    try:
        words = data.decode("utf-8").split()
    except UnicodeDecodeError as exc:
        raise ValueError(f"--words {path}: not UTF-8 ({exc.reason} at byte {exc.start}); "
                         f"save it as UTF-8") from None
    allowed = set(charset)
    if allowed:
        words = [w for w in words if set(w) <= allowed]
    if not words:
        raise ValueError(f"--words {path}: no word" + (" made only of --charset's characters"
                                                       if allowed else ""))
    return words


def font_name(font: Path, root: Path) -> str:
    """The font's group: its path under --fonts without the suffix (DejaVuSans, serif/Foo)."""
    return font.relative_to(root).with_suffix("").as_posix()


def missing_glyphs(font_path: Path, chars) -> list[str]:
    """The characters of `chars` (whitespace aside) that the font has no glyph for: FreeType
    would draw its .notdef box for them, and the line's label would not match its pixels.
    TrueType/OpenType by their cmap (fontTools); Type 1 (.pfb) by glyph name (the Adobe Glyph
    List)."""
    font_path = Path(font_path)
    wanted = sorted({c for c in chars if not c.isspace()})
    if font_path.suffix.lower() == ".pfb":
        from fontTools.agl import UV2AGL
        from fontTools.t1Lib import T1Font

        t1 = T1Font(str(font_path))
        t1.parse()
        names = set(t1.font["CharStrings"].keys())
        return [c for c in wanted if UV2AGL.get(ord(c), f"uni{ord(c):04X}") not in names]
    from fontTools.ttLib import TTFont

    with TTFont(str(font_path), fontNumber=0, lazy=True) as font:
        cmap = font.getBestCmap() or {}
    return [c for c in wanted if ord(c) not in cmap]


def check_glyphs(fonts, names, words) -> None:
    """A ValueError naming every font that lacks a glyph the word list needs, and the fix."""
    chars = set("".join(words))
    bad = []
    for font, name in zip(fonts, names, strict=True):
        try:
            missing = missing_glyphs(font, chars)
        except Exception as exc:  # noqa: BLE001 - any parse failure: name the file
            raise ValueError(f"--fonts {font}: not a font file fontTools can read "
                             f"({type(exc).__name__}: {exc}); remove it") from None
        if missing:
            bad.append(f"{name} lacks {' '.join(repr(c) for c in missing)}")
    if bad:
        raise ValueError(f"--fonts: {len(bad)} font(s) would draw a .notdef box where the word "
                         f"list has a character: {'; '.join(bad)}. Remove those fonts, or "
                         f"keep only characters they have with --charset")


def draw_text(rng, words, style: Style) -> str:
    n = int(rng.integers(1, style.words + 1))
    text = " ".join(words[int(i)] for i in rng.integers(0, len(words), n))
    return text[:style.max_chars].strip() or words[0][:style.max_chars]


def render(font_path: Path, text: str, rng, style: Style):
    """(uint8 H x W grey line at style.height, the draws as a dict)."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    size = int(rng.integers(style.size[0], style.size[1] + 1))
    font = ImageFont.truetype(str(font_path), size, layout_engine=ImageFont.Layout.BASIC)
    tracking = float(rng.uniform(*style.tracking)) * size
    offsets = rng.normal(0.0, style.jitter * size, len(text))
    sheared = bool(rng.random() < style.shear_p)
    shear = float(rng.uniform(-style.shear, style.shear)) if sheared else 0.0
    paper = int(rng.integers(style.paper[0], style.paper[1] + 1))
    ink = int(rng.integers(0, max(paper - style.contrast, 0) + 1))
    blur = float(rng.uniform(*style.blur))
    sigma = float(rng.uniform(*style.noise))
    box = crop_draws(rng, style, size)  # None without style.text_height: no draw
    ascent, descent = font.getmetrics()
    pad = size // 4 if box is None else box["pad"]
    advances = [font.getlength(c) for c in text]
    width = int(sum(advances) + tracking * max(len(text) - 1, 0)) + 2 * pad + size
    height = ascent + descent + 2 * pad
    mask = Image.new("L", (max(width, 1), height), 0)
    draw = ImageDraw.Draw(mask)
    x = float(pad + size // 2)
    for c, adv, dy in zip(text, advances, offsets, strict=True):
        if not c.isspace():  # coverage over coverage: the larger stays (fill 255 over it)
            draw.text((round(x), pad + round(float(dy))), c, font=font, fill=255)
        x += adv + tracking
    if shear:  # x' = x + shear * (y - centre): the top leans right for shear > 0
        mask = mask.transform(mask.size, Image.Transform.AFFINE,
                              (1, shear, -shear * height / 2, 0, 1, 0),
                              resample=Image.Resampling.BILINEAR)
    cols = np.nonzero(np.asarray(mask).max(axis=0))[0]
    if box is not None:
        mask = crop_box(mask, cols, box, pad + ascent)
    elif len(cols):
        left, right = max(int(cols[0]) - pad, 0), min(int(cols[-1]) + pad + 1, mask.size[0])
        mask = mask.crop((left, 0, right, height))
    if blur > 0.05:
        mask = mask.filter(ImageFilter.GaussianBlur(blur))
    a = np.asarray(mask, dtype=np.float64) / 255.0
    grey = paper + (ink - paper) * a + rng.normal(0.0, sigma, a.shape)
    line = Image.fromarray(np.clip(np.rint(grey), 0, 255).astype(np.uint8))
    out_w = max(1, round(line.size[0] * style.height / line.size[1]))
    line = line.resize((out_w, style.height), Image.Resampling.LANCZOS)
    draws = {"size": size, "tracking": round(tracking / size, 4), "shear": round(shear, 4),
             "paper": paper, "ink": ink, "blur": round(blur, 3), "noise": round(sigma, 3)}
    if box is not None:
        draws.update({k: round(box[k], 4) for k in ("text_height", "offset")},
                     margin=[round(m, 4) for m in box["margin"]],
                     crop=tightness(box["text_height"]))
    return np.asarray(line), draws


def crop_draws(rng, style: Style, size: int):
    """The line box's draws (text height, offset, left and right margins) and the canvas pad
    that holds any of them; None (nothing drawn) without style.text_height."""
    if style.text_height is None:
        return None
    frac = float(rng.uniform(*style.text_height))
    offset = float(rng.uniform(*style.offset))
    line = size / frac  # the line's height at the rendered size
    margin = [float(m) for m in rng.uniform(*style.margin, 2)] if style.margin is not None \
        else [size / 4 / line] * 2
    return {"text_height": frac, "offset": offset, "margin": margin, "line": line,
            "pad": int(line) + size}


def crop_box(mask, cols, box: dict, baseline: int):
    """mask cut to the line box: `line` pixels high around the text's centre (0.35 font sizes
    above the baseline, moved by offset line heights), from the first inked column less the
    left margin to the last plus the right one (Pillow fills what lies outside with 0)."""
    line = box["line"]
    size = line * box["text_height"]
    top = round(baseline - 0.35 * size - line / 2 + box["offset"] * line)
    first, last = (int(cols[0]), int(cols[-1])) if len(cols) else (0, 0)
    left = first - round(box["margin"][0] * line)
    right = last + 1 + round(box["margin"][1] * line)
    return mask.crop((left, top, right, top + max(1, round(line))))


def png_bytes(pixels) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def check_out(out: Path, inputs=()) -> Path:
    """out, refused (ValueError naming it and the fix) when replacing it could lose anything
    synth_ocr did not write: `.`, `..` or any folder holding the working directory, a folder
    holding (or being) one of inputs (--fonts, --words, --real), or an existing path without
    synth_ocr's MARKER file."""
    full = Path(out).resolve()
    here = Path.cwd().resolve()
    if not Path(out).name or Path(out).name in (".", "..") or full == here \
            or full in here.parents or full.parent == full:
        raise ValueError(f"--out {out}: the working directory or a folder above it; give a new "
                         f"folder for the lines (--out data/synth)")
    for flag, path in inputs:
        inner = Path(path).resolve()
        if inner == full or full in inner.parents:
            raise ValueError(f"--out {out}: holds {flag} {path}, which synth_ocr would replace; "
                             f"give an --out outside it (--out data/synth)")
    if full.exists() and not (full.is_dir() and not full.is_symlink()
                              and (full / MARKER).is_file()):
        raise ValueError(f"--out {out}: exists and was not written by synth_ocr (no {MARKER} "
                         f"file in it), so it is left alone; give a new folder, or move it "
                         f"away yourself")
    return Path(out)


def temp_folder(out: Path) -> Path:
    """A new, marked temp folder beside out (its name holds this process's id); the ones an
    earlier run was killed before renaming (marked, their process gone) are removed first.
    Nothing else beside out is touched."""
    import os
    import re
    import shutil

    pattern = re.compile(rf"^\.{re.escape(out.name)}\.synth_ocr-(\d+)\.part$")
    if out.parent.is_dir():
        for sibling in out.parent.iterdir():
            m = pattern.match(sibling.name)
            if m and (sibling / MARKER).is_file() and not alive(int(m[1])):
                shutil.rmtree(sibling, ignore_errors=True)
    tmp = out.with_name(f".{out.name}.synth_ocr-{os.getpid()}.part")
    (tmp / "images").mkdir(parents=True)  # an existing one (this pid's) is an error
    (tmp / MARKER).write_text(MARKER_TEXT, encoding="utf-8")
    return tmp


def alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def draw_line(font: Path, words, style: Style, seed: int, i: int, max_aspect: float):
    """(text, pixels, draws) of line i: from the generator of (seed, i), drawn again from
    (seed, i, attempt) while the line is taller than wide by more than max_aspect (validate's
    aspect check would block it: a line of one narrow character); a ValueError naming the fix
    after MAX_DRAWS draws."""
    import numpy as np

    for attempt in range(MAX_DRAWS):
        rng = np.random.default_rng([seed, i] if attempt == 0 else [seed, i, attempt])
        text = draw_text(rng, words, style)
        pixels, draws = render(font, text, rng, style)
        if not max_aspect or pixels.shape[0] <= max_aspect * pixels.shape[1]:
            return text, pixels, draws
    raise ValueError(f"--words: {MAX_DRAWS} draws of line {i} ({font.name}) were all taller "
                     f"than wide by more than validate.max_aspect ({max_aspect}), e.g. "
                     f"{text!r}: give a word list with longer words")


def synthesize(fonts_dir: Path, words_file: Path, lines: int, out: Path, seed: int = 0,
               charset: str = "", holdout=(), style: Style = Style(), real=(), real_dir=None,
               max_aspect: float = 2.0, test=(), test_dirs=()) -> dict:
    """Write `lines` lines under out/images/ and their list out/lines.jsonl ({"path", "text",
    "group": the font, "font", "font_sha256", "split" (with holdout: test for a held-out font,
    else train), and the draws}); the counts per font. real: [(file, relative path, text)] of
    the user's own lines (from real_dir), copied under out/real/ and listed with group `real`
    (split train with holdout). Every line passes validate's aspect check at max_aspect (its
    default, 2.0; 0: unchecked). Written to a marked temp folder then renamed, so `out`
    appears whole; an existing `out` is replaced only when synth_ocr wrote it (check_out).
    test: [(name, [(file, relative path, text, facets)])] of held-out renderers' lines (from
    test_dirs), each copied under out/<name>/ with split test and the faceted group
    `renderer=NAME;font=...;crop=...` (stages/tasks/ocr/groups.py); every other line then gets
    a split too (train, or test for a held-out font)."""
    import os
    import shutil

    fonts_dir, out = Path(fonts_dir), Path(out)
    check_out(out, [("--fonts", fonts_dir), ("--words", words_file)]
              + ([("--real", real_dir)] if real_dir else [])
              + [("--test-set", d) for d in test_dirs])
    if not 1 <= lines <= MAX_LINES:
        raise ValueError(f"--lines {lines}: give 1 to {MAX_LINES}")
    renderers = [name for name, _ in test]
    if len(set(renderers)) < len(renderers) or {"images", "real"} & set(renderers):
        raise ValueError(f"--test-set: folders named {', '.join(renderers)}: each renderer's "
                         f"lines go under OUT/<its folder's name>/, so the names must differ "
                         f"and be neither `images` nor `real`; rename one")
    check_style(style)
    fonts = find_fonts(fonts_dir)
    words = read_words(words_file, charset)
    names = [font_name(f, fonts_dir) for f in fonts]
    check_glyphs(fonts, names, words)
    unknown = sorted(set(holdout) - set(names))
    if unknown:
        raise ValueError(f"--holdout {', '.join(unknown)}: no such font under {fonts_dir} "
                         f"(fonts are named by path without suffix: {', '.join(names[:8])})")
    digests = [hashlib.sha256(f.read_bytes()).hexdigest() for f in fonts]
    tmp = temp_folder(out)
    try:
        counts = write_lines(tmp, fonts, names, digests, words, lines, seed, holdout, style,
                             real, max_aspect, test)
        if out.exists():  # synth_ocr's own (check_out): moved aside, then removed
            old = out.with_name(f".{out.name}.synth_ocr-{os.getpid()}.old")
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return counts


def write_lines(tmp: Path, fonts, names, digests, words, lines: int, seed: int, holdout,
                style: Style, real, max_aspect: float, test=()) -> dict:
    import shutil

    digits = max(5, len(str(lines - 1)))
    rows, counts = [], {}
    for i in range(lines):
        k = i % len(fonts)
        text, pixels, draws = draw_line(fonts[k], words, style, seed, i, max_aspect)
        rel = f"images/{i:0{digits}d}.png"
        (tmp / rel).write_bytes(png_bytes(pixels))
        row = {"path": rel, "text": text, "group": names[k], "font": names[k],
               "font_sha256": digests[k], **draws}
        if holdout or test:
            row["split"] = "test" if names[k] in holdout else "train"
        rows.append(json.dumps(row, ensure_ascii=False, sort_keys=True))
        counts[names[k]] = counts.get(names[k], 0) + 1
    for src, rel, text in sorted(real, key=lambda r: r[1]):
        (tmp / "real" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, tmp / "real" / rel)
        row = {"path": f"real/{rel}", "text": text, "group": "real"}
        rows.append(json.dumps({**row, **({"split": "train"} if holdout or test else {})},
                               ensure_ascii=False, sort_keys=True))
    if real:
        counts["real"] = len(real)
    for name, lines_of in test:
        rows += test_rows(tmp, name, lines_of)
        counts[f"test-set:{name}"] = len(lines_of)
    (tmp / LIST).write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return dict(sorted(counts.items()))


def test_rows(tmp: Path, name: str, lines) -> list[str]:
    """The held-out renderer's lines copied under tmp/name/ and their list rows."""
    import shutil

    rows = []
    for src, rel, text, facets in sorted(lines, key=lambda r: r[1]):
        (tmp / name / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, tmp / name / rel)
        group = ";".join([f"renderer={name}"] + [f"{k}={facets[k]}" for k in ("font", "crop")
                                                  if facets.get(k)])
        rows.append(json.dumps({"path": f"{name}/{rel}", "text": text, "group": group,
                                "split": "test"}, ensure_ascii=False, sort_keys=True))
    return rows


def style_dict(style: Style) -> dict:
    return asdict(style)
