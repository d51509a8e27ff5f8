"""Test lines from another renderer than the training generator (tools.synth_ocr), to test a
reader on; tight, medium and loose crops in turn. `--renderer plain` (the default,
stages/tasks/ocr/plainrender.py): Pillow's plain ImageDraw.text of the whole line, rotation,
gradient paper, box blur, specks. `--renderer agg` (stages/tasks/ocr/aggrender.py): matplotlib's
outlines filled by its Agg rasteriser, flat paper, Gaussian blur and noise, JPEG.

Writes PaddleOCR's recognition list `OUT/rec_gt.txt` (path<TAB>text) beside `OUT/images/` and
`OUT/.lines.jsonl` (each line's renderer, font, crop tightness and draws; hidden, so the
pipeline reading OUT as data.source lists only the lines), into a temp
folder renamed into place; an existing OUT is replaced only when this tool wrote it. As the
pipeline's held-out renderer: `tools.synth_ocr --test-set OUT` (docs/ocr.md).

    python -m tools.ocr_testlines --fonts fonts/ --words words.txt --lines 600 --out data/plain
    python -m tools.ocr_testlines --renderer agg ... --out data/agg
"""
import sys
from pathlib import Path

import click

MARKER = ".ocr_testlines"
FACTS = ".lines.jsonl"  # each line's font, crop and draws (hidden: not a data file)
RENDERERS = ("plain", "agg")


@click.command()
@click.option("--fonts", required=True, type=click.Path(path_type=Path),
              help="Folder of .ttf/.otf/.ttc font files (searched recursively).")
@click.option("--words", required=True, type=click.Path(path_type=Path),
              help="UTF-8 word list or corpus: whitespace-separated tokens.")
@click.option("--lines", required=True, type=click.IntRange(1, 100_000),
              help="Lines to render (line i: font i mod #fonts; crops in turn, 7 at a time).")
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="A new folder, or one this tool wrote before (replaced whole).")
@click.option("--seed", default=0, show_default=True, help="Line i draws from (seed, i).")
@click.option("--charset", default="", help="Keep only words made of these characters.")
@click.option("--max-chars", default=16, show_default=True, type=click.IntRange(1, 200),
              help="Characters per line, at most.")
@click.option("--renderer", type=click.Choice(RENDERERS), default="plain", show_default=True,
              help="plain: Pillow's whole-line text, rotation, gradient paper, specks; agg: "
                   "matplotlib's outlines through Agg, flat paper, blur, noise, JPEG.")
def main(fonts, words, lines, out, seed, charset, max_chars, renderer):
    """Render test lines with another renderer than synth_ocr into a PaddleOCR list."""
    try:
        counts = write(fonts, words, lines, out, seed, charset, max_chars, renderer)
    except (ValueError, OSError) as exc:
        click.echo(f"ocr_testlines: {exc}", err=True)
        sys.exit(2)
    click.echo(f"wrote {lines} lines from {len(counts)} fonts to {out}/rec_gt.txt")


def write(fonts_dir: Path, words_file: Path, lines: int, out: Path, seed: int = 0,
          charset: str = "", max_chars: int = 16, renderer: str = "plain") -> dict:
    import json
    import os
    import shutil

    from stages.tasks.ocr import aggrender, plainrender, synth

    out = Path(out)
    if out.exists() and not (out / MARKER).is_file():
        raise ValueError(f"--out {out}: exists and was not written by ocr_testlines; give a "
                         f"new folder")
    fonts = synth.find_fonts(fonts_dir)
    names = [synth.font_name(f, Path(fonts_dir)) for f in fonts]
    words = synth.read_words(words_file, charset)
    synth.check_glyphs(fonts, names, words)
    module = {"plain": plainrender, "agg": aggrender}[renderer]
    style = plainrender.Plain(max_chars=max_chars) if renderer == "plain" else \
        aggrender.Agg(max_chars=max_chars)
    tmp = out.with_name(f".{out.name}.ocr_testlines-{os.getpid()}.part")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "images").mkdir(parents=True)
    (tmp / MARKER).write_text("written by tools.ocr_testlines\n", encoding="utf-8")
    try:
        listing, rows, counts = [], [], {}
        for i in range(lines):
            k = i % len(fonts)
            text, pixels, draws = module.draw_line(fonts[k], words, style, seed, i)
            rel = f"images/{i:05d}.png"
            (tmp / rel).write_bytes(synth.png_bytes(pixels))
            listing.append(f"{rel}\t{text}\n")
            rows.append(json.dumps({"path": rel, "text": text, "font": names[k],
                                    "renderer": renderer, **draws},
                                   ensure_ascii=False, sort_keys=True) + "\n")
            counts[names[k]] = counts.get(names[k], 0) + 1
        (tmp / "rec_gt.txt").write_text("".join(listing), encoding="utf-8")
        (tmp / FACTS).write_text("".join(rows), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return counts


if __name__ == "__main__":
    main()
