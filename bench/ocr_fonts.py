"""OCR on fonts it never saw (issue 45): lines rendered by tools.synth_ocr, some fonts for
training and others held out, then CER and line accuracy on test lines of the seen fonts and of
the held-out ones, for each variant (MODEL or MODEL+strokes: the sample's augmentation, plus
the bench's STROKES), beside `tesseract --psm 7 -l eng` on the same lines (bench/ocr_tesseract.py;
skipped, with a line saying so, when Tesseract is not installed). Fonts: matplotlib's bundled
ones by default (the same files wherever the pinned matplotlib is), or any folder with
--fonts-dir (Debian's font packages: /usr/share/fonts), named by file name without suffix.
Also each model's parameters and predict CPU time per line (user + sys, batch 64, forward and
greedy decoding): PyTorch eager and onnxruntime, on --threads threads.

Training is an in-process loop over the task's own pieces (TASK.build_model, TASK.augment
seeded per (seed, epoch, index), TASK.loss, the stage's optimizer and lr schedule,
train.grad_clip), not the DVC pipeline: small enough for 2 cores. Decoding and CER are the
task's (ctc.greedy, metrics.scores). The figures and their commands: docs/benchmarks.md.

    python -m bench.ocr_fonts [--fonts-dir DIR --train-fonts A,B --held-out C,D]
        [--train-lines 2400] [--epochs 8] [--threads 2] [--variants crnn,crnn+strokes]
"""
import dataclasses
import tempfile
import time
from pathlib import Path

import click

from bench.ocr_font_sets import SETS

TRAIN_FONTS = ("DejaVuSans", "DejaVuSans-Bold", "DejaVuSansMono", "DejaVuSerif-Bold")
HELD_OUT = ("DejaVuSans-Oblique", "DejaVuSerif", "STIXGeneral")
WORDS = ("Invoice No. total subtotal amount due paid balance EUR USD GBP qty unit price "
         "item description date order account number Street Road Avenue Berlin Paris London "
         "Madrid the and for with from of to in on at by ref VAT tax net gross discount page "
         "customer supplier delivery address phone email www example com 2024 2025 12/05 "
         "03.11 100% 7.5% 39.95 1,250.00 #42 A-17 B2 (copy) total: Note: yes no OK "
         "Quantity Jazz Kiosk Xerox Yacht Zurich Hamburg Cheque Freight Wharf Quay jug kg km "
         "ZIP FAX HQ CEO WX-9 J-6 Q3 68 86 8.68 6,000 1968 0800 Oxford Jakarta Quebec Warsaw "
         "Helsinki Zagreb Kyiv Fjord & +49 Yes! Why? x=3 5*8")
# the space is a class: without it every space between words was an error (the model could
# not write one), which alone put a CER near 0.1 on lines the model read right otherwise
CHARSET = "".join(sorted(set(WORDS)))
# Milder than the first values (stroke 0.5, shear 0.25, aspect 0.2, elastic 1.0, texture 0.15,
# downscale 0.4, jpeg 0.3): stacked on the sample's rotate/stretch/blur/jitter those left a
# 5-epoch CRNN at CER 0.91 (docs/benchmarks.md); at 32 px a 1-px elastic warp and a 0.6x
# downscale already blur 1-2 px strokes of small glyphs into each other.
STROKES = {"aug_stroke": 0.3, "aug_shear": 0.15, "aug_aspect": 0.15, "aug_elastic": 0.5,
           "aug_texture": 0.1, "aug_downscale": 0.3, "aug_jpeg": 0.2}


def render(folder: Path, lines_per_font: dict, paths: dict, seed: int) -> dict:
    """{font: [(uint8 32 x 192 line, text, uint8 line at its natural width)]}: each font's own
    synth_ocr run (seed * 100 + its index among the fonts sorted by name)."""
    import json
    import shutil

    import numpy as np
    from PIL import Image

    from stages.lib.modality.imagecore import fit
    from stages.tasks.ocr.synth import Style, synthesize

    (folder / "words.txt").write_text(WORDS + "\n", encoding="utf-8")
    out = {}
    for k, (font, n) in enumerate(sorted(lines_per_font.items())):
        fonts = folder / f"fonts-{font}"
        fonts.mkdir()
        shutil.copy(paths[font], fonts)
        synthesize(fonts, folder / "words.txt", n, folder / font, seed * 100 + k,
                   style=Style(max_chars=16))
        rows = [json.loads(x) for x in (folder / font / "lines.jsonl").read_text().splitlines()]
        out[font] = []
        for r in rows:
            img = Image.open(folder / font / r["path"]).convert("L")
            out[font].append((fit(img, [32, 192]), r["text"], np.asarray(img)))
    return out


def tensors(items, charset):
    import numpy as np
    import torch

    from stages.tasks.common.ctc import encode

    index = {c: i + 1 for i, c in enumerate(charset)}
    x = torch.from_numpy(np.stack([it[0] for it in items]).astype(np.float32))[:, None]
    x = (x / 255 - 0.5) / 0.5
    y = torch.tensor([encode(it[1], index, 16) for it in items], dtype=torch.int32)
    return x, y


def train(name, p, x, y, classes, log=print):
    import torch

    from stages.lib.train.augment import epoch_order, sample_seed
    from stages.lib.train.loop import lr_factor, make_optimizer
    from stages.tasks.ocr import TASK
    from stages.tasks.ocr.model import build_model

    torch.manual_seed(p.seed)
    model = build_model(name, classes, 1, 32)
    opt = make_optimizer(p, model)
    tic, wall = time.process_time(), time.perf_counter()
    for epoch in range(p.epochs):
        for group in opt.param_groups:
            group["lr"] = p.lr * lr_factor(p, epoch)
        model.train()
        order = epoch_order(len(x), p.seed, epoch)
        total, batches = 0.0, 0
        for b in range(0, len(order), p.batch_size):
            idx = order[b:b + p.batch_size].tolist()
            xb = torch.stack([TASK.augment(x[i], y[i], p, sample_seed(p.seed, epoch, i))[0]
                              for i in idx])
            loss = TASK.loss(model(xb), y[idx], p)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), p.grad_clip)
            opt.step()
            total, batches = total + loss.item(), batches + 1
        log(f"  epoch {epoch + 1}/{p.epochs} loss {total / max(batches, 1):.4f} "
            f"({time.process_time() - tic:.0f} CPU s, {time.perf_counter() - wall:.0f} s wall)")
    return model.eval(), time.process_time() - tic, time.perf_counter() - wall


def score(model, x, texts, charset):
    import torch

    from stages.tasks.common.ctc import greedy
    from stages.tasks.common.ctc import scores

    with torch.no_grad():
        outputs = torch.cat([model(x[i:i + 64]) for i in range(0, len(x), 64)]).numpy()
    return scores(texts, [t for t, _ in greedy(outputs, charset)])


def cpu_ms_per_line(model, x, charset, rounds=3):
    """Predict's CPU time per line (user + sys of this process, best of rounds): PyTorch eager,
    batch 64, no grad, forward and greedy CTC decoding."""
    import torch

    from stages.tasks.common.ctc import greedy

    best = float("inf")
    with torch.no_grad():
        for _ in range(rounds):
            tic = time.process_time()
            for i in range(0, len(x), 64):
                greedy(model(x[i:i + 64]).numpy(), charset)
            best = min(best, (time.process_time() - tic) / len(x) * 1000)
    return best


def onnx_blob(model, x) -> bytes:
    """The model exported as the export stage does (dynamo, dynamic batch)."""
    import tempfile as tf
    import warnings

    import torch

    with tf.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (x[:2],), f"{tmp}/m.onnx", input_names=["input"],
                          output_names=["logits"], external_data=False, verbose=False,
                          dynamic_shapes=({0: torch.export.Dim("batch")},))
        return Path(f"{tmp}/m.onnx").read_bytes()


def session_ms_per_line(session, x, charset, rounds=3):
    """Predict's CPU ms per line through an onnxruntime session (batch 64, greedy decoding)."""
    from stages.tasks.common.ctc import greedy

    xs = x.numpy()
    best = float("inf")
    for _ in range(rounds):
        tic = time.process_time()
        for i in range(0, len(xs), 64):
            greedy(session.run(None, {"input": xs[i:i + 64]})[0], charset)
        best = min(best, (time.process_time() - tic) / len(xs) * 1000)
    return best


def onnx_ms_per_line(model, x, charset, threads, rounds=3):
    """The same through onnxruntime (its intra-op pool of `threads`)."""
    from stages.lib.model.formats import onnx_session

    return session_ms_per_line(onnx_session(onnx_blob(model, x), threads), x, charset, rounds)


def int8_scores(model, calibration, tests, train_fonts, held_out, charset, threads) -> dict:
    """The model quantized as export's onnx_int8 (stages/lib/model/formats.py: int8_bytes),
    calibrated
    on `calibration` lines: its CER and line accuracy seen and unseen, per held-out font, and
    its predict CPU ms per line on every test line."""
    from stages.tasks.common.ctc import greedy, scores
    from stages.lib.model.formats import int8_bytes, onnx_session

    blob = int8_bytes(onnx_blob(model, calibration), calibration.numpy())
    session = onnx_session(blob, threads)

    def read(items):
        xs = tensors(items, charset)[0].numpy()
        out = [session.run(None, {"input": xs[i:i + 64]})[0] for i in range(0, len(xs), 64)]
        return [t for o in out for t, _ in greedy(o, charset)]

    out = {}
    for kind, fonts in (("seen", train_fonts), ("unseen", held_out)):
        items = [it for f in fonts for it in tests[f]]
        s = scores([it[1] for it in items], read(items))
        out[f"int8_cer_{kind}"], out[f"int8_acc_{kind}"] = s["cer"], s["line_accuracy"]
    for f in held_out:
        out[f"int8 {f}"] = scores([it[1] for it in tests[f]], read(tests[f]))["cer"]
    every = [it for f in (*train_fonts, *held_out) for it in tests[f]]
    out["int8_cpu_ms_per_line"] = session_ms_per_line(session, tensors(every, charset)[0],
                                                      charset)
    return out


def names(option: str, value: str) -> tuple:
    out = tuple(n.strip() for n in value.split(",") if n.strip())
    if not out:
        raise click.BadParameter("give at least one font name", param_hint=option)
    return out


def row_text(r, held_out) -> str:
    return (f"{r['variant']:24s} params {r.get('params', 0):>9,}  CER seen {r['cer_seen']:.4f} "
            f"(line acc {r['acc_seen']:.3f})  unseen {r['cer_unseen']:.4f} "
            f"(line acc {r['acc_unseen']:.3f})  "
            + "  ".join(f"{f} {r[f]:.4f}" for f in held_out)
            + (f"  train {r['train_cpu_s']:.0f} CPU s, {r['train_wall_s']:.0f} s wall"
               if "train_cpu_s" in r else "")
            + f"  predict {r['cpu_ms_per_line']:.2f} CPU ms/line"
            + (f" (ONNX {r['onnx_cpu_ms_per_line']:.2f})" if "onnx_cpu_ms_per_line" in r else "")
            + (f" (int8 {r['int8_cpu_ms_per_line']:.2f}; int8 CER seen {r['int8_cer_seen']:.4f}"
               f" unseen {r['int8_cer_unseen']:.4f})" if "int8_cpu_ms_per_line" in r else "")
            + (f" (one process per line {r['spawn_cpu_ms_per_line']:.1f})"
               if "spawn_cpu_ms_per_line" in r else ""))


@click.command()
@click.option("--fonts-dir", multiple=True,
              type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Take the fonts from this folder (searched recursively; a font is named by "
                   "its file name without suffix) instead of matplotlib's bundled ones; "
                   "repeat it for several folders.")
@click.option("--font-set", type=click.Choice(sorted(SETS)),
              help="A named set of train and held-out fonts and their folders "
                   "(bench/ocr_font_sets.py); --train-fonts, --held-out and --fonts-dir, "
                   "when given, replace its parts.")
@click.option("--train-fonts", help="Comma-separated fonts to train on (and test as 'seen') "
                                    f"[default: {','.join(TRAIN_FONTS)}].")
@click.option("--held-out", help="Comma-separated fonts never trained on (tested as 'unseen') "
                                 f"[default: {','.join(HELD_OUT)}].")
@click.option("--train-lines", default=2400, show_default=True, help="Over the train fonts.")
@click.option("--test-lines", default=150, show_default=True, help="Per font, seen and unseen.")
@click.option("--seen-test-lines", type=int,
              help="Per seen font, when it should differ from --test-lines (many train fonts).")
@click.option("--int8/--no-int8", default=False, show_default=True,
              help="Also quantize each model as export's onnx_int8 does (calibrated on 256 "
                   "training lines), and score and time it.")
@click.option("--epochs", default=8, show_default=True)
@click.option("--threads", default=2, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--variants", default="crnn,crnn+strokes,crnn_large+strokes", show_default=True,
              help="MODEL or MODEL+strokes (the bench's STROKES), comma-separated; '' trains "
                   "none (the Tesseract column only).")
@click.option("--tesseract/--no-tesseract", default=True, show_default=True,
              help="Score `tesseract --psm 7 -l eng` on the same test lines.")
@click.option("--tesseract-scale", default=1, show_default=True, type=click.IntRange(1, 8),
              help="Upscale each line this many times (Lanczos) before Tesseract reads it "
                   "(2x and 3x read the bench's 32-px lines no better).")
@click.option("--tesseract-spawn", default=40, show_default=True,
              help="Also time one tesseract process per line on this many lines (0: not).")
@click.option("--onnx/--no-onnx", default=True, show_default=True,
              help="Also time predict through onnxruntime.")
@click.option("--load", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Score the models a --save run wrote (VARIANT.pt) instead of training.")
@click.option("--save", type=click.Path(path_type=Path, file_okay=False),
              help="Write each trained model's state_dict here (VARIANT.pt).")
@click.option("--json", "json_out", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write the rows as JSON here.")
def main(fonts_dir, font_set, train_fonts, held_out, train_lines, test_lines, seen_test_lines,
         int8, epochs, threads, seed, variants, tesseract, tesseract_scale, tesseract_spawn,
         onnx, load, save, json_out):
    """Train on some fonts, test on them and on held-out fonts, beside Tesseract."""
    import json

    from bench.ocr_tesseract import MISSING, pick_fonts

    set_train, set_held, set_dirs = SETS[font_set] if font_set else (TRAIN_FONTS, HELD_OUT, ())
    train_fonts = names("--train-fonts", train_fonts or ",".join(set_train))
    held_out = names("--held-out", held_out or ",".join(set_held))
    fonts_dir = list(fonts_dir) or [Path(d) for d in set_dirs if Path(d).is_dir()]
    seen_test_lines = seen_test_lines or test_lines
    if set(train_fonts) & set(held_out):
        raise click.BadParameter(f"{sorted(set(train_fonts) & set(held_out))} both trained on "
                                 f"and held out", param_hint="--held-out")
    if not fonts_dir:
        import matplotlib
        fonts_dir = [Path(matplotlib.__file__).parent / "mpl-data" / "fonts" / "ttf"]
    try:
        paths = dict(pick_fonts(fonts_dir, (*train_fonts, *held_out)))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None

    import torch

    from stages.lib.params import Train
    from stages.tasks.ocr import TASK

    torch.set_num_threads(threads)
    recipe = {k.split(".", 1)[1]: v for k, v in TASK.recipe.items() if k.startswith("train.")}
    # the figures in docs/benchmarks.md were measured before the recipe's crop of the line box
    # (train.aug_crop_line): bench/ocr_peers.py measures it
    base = dataclasses.replace(Train(**recipe), epochs=epochs, seed=seed, aug_crop_line=0.0)
    per_font = train_lines // len(train_fonts)
    charset = sorted(CHARSET)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tic = time.perf_counter()
        # train and test lines of a seen font come from one synth run (other lines by index)
        lines = render(Path(tmp), {**{f: per_font + seen_test_lines for f in train_fonts},
                                   **{f: test_lines for f in held_out}}, paths, seed)
        print(f"rendered {sum(map(len, lines.values()))} lines in "
              f"{time.perf_counter() - tic:.1f} s", flush=True)
        tests = {**{f: lines[f][-seen_test_lines:] for f in train_fonts},
                 **{f: lines[f][-test_lines:] for f in held_out}}
        if tesseract:
            rows += tesseract_row(tests, train_fonts, held_out, Path(tmp) / "tess",
                                  tesseract_scale, tesseract_spawn, MISSING)
    train_items = [it for f in train_fonts for it in lines[f][:per_font]]
    del lines
    x, y = tensors(train_items, charset)
    for variant in filter(None, variants.split(",")):
        name, _, extra = variant.partition("+")
        p = dataclasses.replace(base, **(STROKES if extra == "strokes" else {}))
        if load:
            from stages.tasks.ocr.model import build_model

            model = build_model(name, 1 + len(charset), 1, 32)
            model.load_state_dict(torch.load(load / f"{variant}.pt", weights_only=True))
            model.eval()
            result = {"variant": variant, "params": sum(q.numel() for q in model.parameters())}
        else:
            print(f"{variant}: training on {len(x)} lines, {epochs} epochs", flush=True)
            model, cpu, wall = train(name, p, x, y, 1 + len(charset),
                                     log=lambda m: print(m, flush=True))
            result = {"variant": variant, "params": sum(q.numel() for q in model.parameters()),
                      "train_cpu_s": cpu, "train_wall_s": wall, "epochs": epochs,
                      "train_lines": len(x)}
        for kind, fonts in (("seen", train_fonts), ("unseen", held_out)):
            items = [it for f in fonts for it in tests[f]]
            s = score(model, tensors(items, charset)[0], [it[1] for it in items], charset)
            result[f"cer_{kind}"], result[f"acc_{kind}"] = s["cer"], s["line_accuracy"]
        for f in held_out:
            xt = tensors(tests[f], charset)[0]
            result[f] = score(model, xt, [it[1] for it in tests[f]], charset)["cer"]
        every = [it for f in (*train_fonts, *held_out) for it in tests[f]]
        xe = tensors(every, charset)[0]
        result["cpu_ms_per_line"] = cpu_ms_per_line(model, xe, charset)
        if onnx:
            result["onnx_cpu_ms_per_line"] = onnx_ms_per_line(model, xe, charset, threads)
        if int8:
            result.update(int8_scores(model, x[:256], tests, train_fonts, held_out, charset,
                                      threads))
        rows.append(result)
        if save:
            save.mkdir(parents=True, exist_ok=True)
            torch.save(model.state_dict(), save / f"{variant}.pt")
        print(row_text(result, held_out), flush=True)
        if json_out:
            write_json(json_out, rows)
    if json_out:
        write_json(json_out, rows)
    print(json.dumps(rows))


def tesseract_row(tests, train_fonts, held_out, workdir, scale, spawn, missing) -> list:
    from bench.ocr_tesseract import tesseract as run_tesseract
    from bench.ocr_tesseract import tesseract_spawned
    from stages.tasks.ocr.metrics import scores

    fonts = (*train_fonts, *held_out)
    got = run_tesseract([it[2] for f in fonts for it in tests[f]], workdir, scale)
    if got is None:
        print(missing, flush=True)
        return []
    texts, cpu = got
    by_font, k = {}, 0
    for f in fonts:
        by_font[f] = texts[k:k + len(tests[f])]
        k += len(tests[f])
    row = {"variant": f"tesseract --psm 7 (x{scale})", "cpu_ms_per_line": cpu * 1000}
    if spawn:
        row["spawn_cpu_ms_per_line"] = tesseract_spawned(workdir, spawn) * 1000
    for kind, group in (("seen", train_fonts), ("unseen", held_out)):
        s = scores([it[1] for f in group for it in tests[f]],
                   [t for f in group for t in by_font[f]])
        row[f"cer_{kind}"], row[f"acc_{kind}"] = s["cer"], s["line_accuracy"]
    for f in held_out:
        row[f] = scores([it[1] for it in tests[f]], by_font[f])["cer"]
    print(row_text(row, held_out), flush=True)
    return [row]


def write_json(path: Path, rows) -> None:
    import json
    import os

    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(rows, indent=1) + "\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
