"""OCR on fonts it never saw (issue 45): lines rendered by tools.synth_ocr from matplotlib's
bundled fonts (the same files on every machine with the pinned matplotlib), some fonts for
training and others held out, then CER on test lines of the seen fonts and of the held-out
ones, for each variant: the default CRNN with the sample's augmentation (the baseline, trained
in the same run), + the stroke augmentations, and crnn_large + the stroke augmentations. Also
each model's parameters and predict time per line (batch 64, PyTorch eager, no grad).

Training is an in-process loop over the task's own pieces (TASK.build_model, TASK.augment
seeded per (seed, epoch, index), TASK.loss, the stage's optimizer and lr schedule,
train.grad_clip), not the DVC pipeline: small enough for 2 cores. Decoding and CER are the
task's (ctc.greedy, metrics.scores).

    python -m bench.ocr_fonts [--train-lines 2400] [--epochs 8] [--threads 2]
"""
import dataclasses
import tempfile
import time
from pathlib import Path

import click

TRAIN_FONTS = ("DejaVuSans", "DejaVuSans-Bold", "DejaVuSansMono", "DejaVuSerif-Bold")
HELD_OUT = ("DejaVuSans-Oblique", "DejaVuSerif", "STIXGeneral")
WORDS = ("Invoice No. total subtotal amount due paid balance EUR USD GBP qty unit price "
         "item description date order account number Street Road Avenue Berlin Paris London "
         "Madrid the and for with from of to in on at by ref VAT tax net gross discount page "
         "customer supplier delivery address phone email www example com 2024 2025 12/05 "
         "03.11 100% 7.5% 39.95 1,250.00 #42 A-17 B2 (copy) total: Note: yes no OK")
CHARSET = "".join(sorted(set(WORDS) - {" "}))
STROKES = {"aug_stroke": 0.5, "aug_shear": 0.25, "aug_aspect": 0.2, "aug_elastic": 1.0,
           "aug_texture": 0.15, "aug_downscale": 0.4, "aug_jpeg": 0.3}


def render(folder: Path, lines_per_font: dict, seed: int) -> dict:
    """{font: [(uint8 32 x 192 line, text)]}: each font's own synth_ocr run."""
    import json
    import shutil

    import matplotlib
    import numpy as np
    from PIL import Image

    from stages.lib.modality.imagecore import fit
    from stages.tasks.ocr.synth import Style, synthesize

    ttf = Path(matplotlib.__file__).parent / "mpl-data" / "fonts" / "ttf"
    (folder / "words.txt").write_text(WORDS + "\n", encoding="utf-8")
    out = {}
    for k, (font, n) in enumerate(sorted(lines_per_font.items())):
        fonts = folder / f"fonts-{font}"
        fonts.mkdir()
        shutil.copy(ttf / f"{font}.ttf", fonts)
        synthesize(fonts, folder / "words.txt", n, folder / font, seed * 100 + k,
                   style=Style(max_chars=16))
        rows = [json.loads(x) for x in (folder / font / "lines.jsonl").read_text().splitlines()]
        out[font] = [(fit(Image.open(folder / font / r["path"]).convert("L"), [32, 192]),
                      r["text"]) for r in rows]
        assert all(a.shape == (32, 192) for a, _ in out[font]) and np
    return out


def tensors(items, charset):
    import numpy as np
    import torch

    from stages.lib.ctc import encode

    index = {c: i + 1 for i, c in enumerate(charset)}
    x = torch.from_numpy(np.stack([a for a, _ in items]).astype(np.float32))[:, None]
    x = (x / 255 - 0.5) / 0.5
    y = torch.tensor([encode(t, index, 16) for _, t in items], dtype=torch.int32)
    return x, y


def train(name, p, x, y, classes):
    import torch

    from stages.lib.augment import epoch_order, sample_seed
    from stages.lib.loop import lr_factor, make_optimizer
    from stages.tasks.ocr import TASK
    from stages.tasks.ocr.model import build_model

    torch.manual_seed(p.seed)
    model = build_model(name, classes, 1, 32)
    opt = make_optimizer(p, model)
    tic = time.process_time()
    for epoch in range(p.epochs):
        for group in opt.param_groups:
            group["lr"] = p.lr * lr_factor(p, epoch)
        model.train()
        order = epoch_order(len(x), p.seed, epoch)
        for b in range(0, len(order), p.batch_size):
            idx = order[b:b + p.batch_size].tolist()
            xb = torch.stack([TASK.augment(x[i], y[i], p, sample_seed(p.seed, epoch, i))[0]
                              for i in idx])
            loss = TASK.loss(model(xb), y[idx], p)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), p.grad_clip)
            opt.step()
    return model.eval(), time.process_time() - tic


def score(model, x, texts, charset):
    import torch

    from stages.lib.ctc import greedy
    from stages.lib.ctc import scores

    with torch.no_grad():
        outputs = torch.cat([model(x[i:i + 64]) for i in range(0, len(x), 64)]).numpy()
    return scores(texts, [t for t, _ in greedy(outputs, charset)])


def ms_per_line(model, x, rounds=3):
    import torch

    best = float("inf")
    with torch.no_grad():
        for _ in range(rounds):
            tic = time.perf_counter()
            for i in range(0, len(x), 64):
                model(x[i:i + 64])
            best = min(best, (time.perf_counter() - tic) / len(x) * 1000)
    return best


@click.command()
@click.option("--train-lines", default=2400, show_default=True, help="Over the train fonts.")
@click.option("--test-lines", default=150, show_default=True, help="Per font, seen and unseen.")
@click.option("--epochs", default=8, show_default=True)
@click.option("--threads", default=2, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--variants", default="crnn,crnn+strokes,crnn_large+strokes", show_default=True)
def main(train_lines, test_lines, epochs, threads, seed, variants):
    import torch

    from stages.lib.params import Train
    from stages.tasks.ocr import TASK

    torch.set_num_threads(threads)
    recipe = {k.split(".", 1)[1]: v for k, v in TASK.recipe.items() if k.startswith("train.")}
    base = dataclasses.replace(Train(**recipe), epochs=epochs, seed=seed)
    per_font = train_lines // len(TRAIN_FONTS)
    with tempfile.TemporaryDirectory() as tmp:
        tic = time.perf_counter()
        # train and test lines of a seen font come from one synth run (other lines by index)
        lines = render(Path(tmp), {**{f: per_font + test_lines for f in TRAIN_FONTS},
                                   **{f: test_lines for f in HELD_OUT}}, seed)
        print(f"rendered {sum(map(len, lines.values()))} lines in "
              f"{time.perf_counter() - tic:.1f} s")
    charset = sorted(CHARSET)
    train_items = [it for f in TRAIN_FONTS for it in lines[f][:per_font]]
    tests = {f: lines[f][-test_lines:] for f in (*TRAIN_FONTS, *HELD_OUT)}
    x, y = tensors(train_items, charset)
    rows = []
    for variant in variants.split(","):
        name, _, extra = variant.partition("+")
        p = dataclasses.replace(base, **(STROKES if extra == "strokes" else {}))
        model, cpu = train(name, p, x, y, 1 + len(charset))
        result = {"variant": variant, "params": sum(q.numel() for q in model.parameters()),
                  "train_cpu_s": cpu}
        for kind, fonts in (("seen", TRAIN_FONTS), ("unseen", HELD_OUT)):
            items = [it for f in fonts for it in tests[f]]
            s = score(model, tensors(items, charset)[0], [t for _, t in items], charset)
            result[f"cer_{kind}"], result[f"acc_{kind}"] = s["cer"], s["line_accuracy"]
        for f in HELD_OUT:
            xt = tensors(tests[f], charset)[0]
            result[f] = score(model, xt, [t for _, t in tests[f]], charset)["cer"]
        result["ms_per_line"] = ms_per_line(model, tensors(tests[HELD_OUT[0]], charset)[0])
        rows.append(result)
        print(f"{variant:22s} params {result['params']:>9,}  CER seen {result['cer_seen']:.4f} "
              f"(line acc {result['acc_seen']:.3f})  unseen {result['cer_unseen']:.4f} "
              f"(line acc {result['acc_unseen']:.3f})  "
              + "  ".join(f"{f} {result[f]:.4f}" for f in HELD_OUT)
              + f"  train {cpu:.0f} CPU s  predict {result['ms_per_line']:.2f} ms/line",
              flush=True)
    ref = rows[0]
    for r in rows[1:]:
        print(f"{r['variant']} / {ref['variant']}: unseen CER x"
              f"{r['cer_unseen'] / max(ref['cer_unseen'], 1e-9):.2f}, seen CER x"
              f"{r['cer_seen'] / max(ref['cer_seen'], 1e-9):.2f}, predict time x"
              f"{r['ms_per_line'] / ref['ms_per_line']:.2f}")


if __name__ == "__main__":
    main()
