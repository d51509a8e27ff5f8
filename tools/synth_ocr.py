"""Synthetic OCR lines from your font files, in the layout `data.source` reads: `lines.jsonl`
({"path", "text", "group": the font, ...} per line) beside `images/`. Seeded and deterministic
for the same fonts, Pillow and FreeType; the font of every line is in the list (its `group`),
so a split can hold whole fonts out (`--holdout NAME` writes split test for that font's lines
and train for the rest; `split.by: given`). The renderer: stages/tasks/ocr/synth.py; the
knobs and how to run it as a DVC stage: docs/ocr.md.

    python -m tools.synth_ocr --fonts fonts/ --words words.txt --lines 2000 --out data/synth
"""
import sys
from pathlib import Path

import click


@click.command()
@click.option("--fonts", "fonts", required=True, type=click.Path(path_type=Path),
              help="Folder of .ttf/.otf/.ttc font files (searched recursively).")
@click.option("--words", "words", required=True, type=click.Path(path_type=Path),
              help="UTF-8 word list or corpus: whitespace-separated tokens.")
@click.option("--lines", "lines", required=True, type=click.IntRange(1, 1_000_000),
              help="Lines to render, at most 1,000,000 (fonts in turn: line i uses font i mod "
                   "#fonts).")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="A new folder to write, or one synth_ocr wrote before (it holds its "
                   ".synth_ocr marker), replaced whole; any other existing path is refused.")
@click.option("--seed", default=0, show_default=True, help="Line i draws from (seed, i).")
@click.option("--charset", default="", help="Keep only words made of these characters.")
@click.option("--holdout", multiple=True,
              help="A font (its path under --fonts without suffix) whose lines go to test; "
                   "the others to train (for split.by: given). Repeatable.")
@click.option("--real", type=click.Path(path_type=Path, file_okay=False),
              help="Your own lines (a folder in any OCR layout), copied under OUT/real/ and "
                   "listed with group `real`: --lines then sets the synthetic share.")
@click.option("--test-set", "test_set", multiple=True,
              type=click.Path(path_type=Path, file_okay=False),
              help="Lines of another renderer (a folder in any OCR layout, e.g. "
                   "tools.ocr_testlines'), copied under OUT/<its name>/ as test lines: a "
                   "held-out renderer of evaluate (with split.by: given). Repeatable.")
@click.option("--height", default=32, show_default=True, type=click.IntRange(min=8),
              help="Written line height in pixels.")
@click.option("--max-aspect", default=2.0, show_default=True, type=click.FloatRange(min=0),
              help="validate.max_aspect of the pipeline the lines are for: a line taller than "
                   "wide by more is drawn again (0: no check).")
@click.option("--text-height", nargs=2, type=float, default=None,
              help="LOW HIGH: the font size as a share of the line height, drawn per line "
                   "(0.55 1.1: loose to a detector's tight crop; the default, not given: the "
                   "font's own box with a quarter size above and below, about 0.6).")
@click.option("--offset", nargs=2, type=float, default=(0.0, 0.0), show_default=True,
              help="LOW HIGH: the text's vertical shift in line heights (with --text-height).")
@click.option("--margin", nargs=2, type=float, default=None,
              help="LOW HIGH: each side's space beyond the ink, in line heights (with "
                   "--text-height; not given: a quarter of the font size).")
def main(fonts, words, lines, out, seed, charset, holdout, real, height, max_aspect,
         text_height, offset, margin, test_set):
    """Render synthetic text lines from font files into a data.source folder."""
    from stages.tasks.ocr.synth import Style, synthesize

    style = Style(height=height, text_height=text_height, offset=tuple(offset),
                  margin=margin)
    try:
        counts = synthesize(fonts, words, lines, out, seed, charset, tuple(holdout),
                            style, real_lines(real) if real else (), real, max_aspect,
                            [test_lines(t) for t in test_set], list(test_set))
    except (ValueError, OSError) as exc:
        click.echo(f"synth_ocr: {exc}", err=True)
        sys.exit(2)
    held = set(holdout)
    tests = {k.split(":", 1)[1]: counts.pop(k) for k in list(counts) if k.startswith("test-set:")}
    for name, n in counts.items():  # "real": your own lines
        click.echo(f"{n:6d}  {name}" + ("  (held out: test)" if name in held else ""))
    real_n = counts.pop("real", 0) if real else 0
    click.echo(f"wrote {lines} lines from {len(counts)} fonts"
               + (f" and {real_n} of your own" if real else "")
               + "".join(f" and {n} test lines of {name}" for name, n in tests.items())
               + f" to {out}/lines.jsonl")


def real_lines(source: Path, flag: str = "--real") -> list:
    """[(file, relative path, text)] of the lines in source, read as data.source would be; a
    ValueError naming the first problems when any entry has one."""
    from stages.ingest import walk
    from stages.tasks.ocr import TASK

    if not source.is_dir():
        raise ValueError(f"{flag} {source}: not a folder")
    from stages.lib.params import defaults

    # your lines as a project with the default params reads them (ocr reads no setting today)
    found = TASK.read_annotations(source, walk(source), TASK.read_settings(defaults()))
    if found.errors:
        named = "; ".join(f"{rel}: {why}" for rel, (_, why) in sorted(found.errors.items())[:5])
        raise ValueError(f"{flag} {source}: {len(found.errors)} entries cannot be read "
                         f"({named}); fix them or run the pipeline on it to see all")
    return [(source / rel, rel, v["text"]) for rel, v in sorted(found.values.items())
            if rel not in found.skip]


def test_lines(source: Path) -> tuple:
    """(the renderer's name: the folder's, [(file, relative path, text, facets)]) of a held-out
    renderer's lines; facets: `font` and `crop` from the folder's hidden .lines.jsonl when it
    lists them (tools.ocr_testlines writes it beside its rec_gt.txt)."""
    import json

    listed = {}
    meta = source / ".lines.jsonl"
    if meta.is_file():
        for line in meta.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            if isinstance(row, dict) and isinstance(row.get("path"), str):
                listed[row["path"]] = {k: str(row[k]) for k in ("font", "crop") if row.get(k)}
    name = source.resolve().name
    return name, [(f, rel, text, listed.get(rel, {}))
                  for f, rel, text in real_lines(source, "--test-set")]


if __name__ == "__main__":
    main()
