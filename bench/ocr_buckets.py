"""OCR width buckets and beam search at predict time, on a trained OCR project: the test lines
through onnxruntime at the trained width (the baseline: every line padded to prepare.width) and
at export.width_buckets (each line cut to the smallest bucket that holds it), then greedy
against a width-K beam: CER, line accuracy and lines/s of each, and the ratios to the baseline.

The model is the project's models/model.pt, exported here in memory with a dynamic width
(stages.lib.model.formats.onnx_bytes); the lines are the project's test split, read as predict
reads them
(tools.inference). Rounds alternate baseline and buckets, so a drifting machine hits both.

    python -m bench.ocr_buckets PROJECT [--buckets 96,144,192] [--beam 5] [--rounds 3]
"""
import tempfile
import time
from pathlib import Path

import click


@click.command()
@click.argument("project", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--buckets", default="96,144,192", show_default=True,
              help="Comma-separated widths (multiples of 4, at most the trained width).")
@click.option("--beam", "width", default=5, show_default=True, help="Beam width compared.")
@click.option("--rounds", default=3, show_default=True, help="Timed rounds of each.")
@click.option("--threads", default=0, show_default=True, help="onnxruntime threads; 0 = all.")
def main(project, buckets, width, rounds, threads):
    import dataclasses

    from stages.lib.model.formats import onnx_bytes
    from stages.lib.io import read_csv
    from stages.tasks import load_model
    from stages.tasks.ocr import TASK
    from stages.tasks.common.ctc import beam
    from stages.tasks.common.ctc import scores
    from stages.lib.modality.imageserve import read as read_image
    from tools.inference import bucket_width, load_onnx, predict_batch

    model, meta = load_model(project / "models/model.pt")
    widths = [int(w) for w in buckets.split(",")]
    rows = read_csv(project / "data/split/test.csv")
    truths = [r["text"] for r in rows]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        path.write_bytes(onnx_bytes(model, meta, TASK, {"width_buckets": widths}))
        bucketed = load_onnx(path, threads)
    fixed = dataclasses.replace(bucketed, width_buckets=[])
    source = project / "data/sample"
    images = [read_image(source / r["path"], fixed.image_size, fixed.channels) for r in rows]
    per_bucket = {}
    for img in images:
        w = bucket_width(bucketed, img.source_size)
        per_bucket[w] = per_bucket.get(w, 0) + 1
    click.echo(f"{len(rows)} test lines of {project}; trained width {fixed.image_size[1]}; "
               f"lines per bucket {dict(sorted(per_bucket.items()))}")

    def run(m):
        out = []
        for i in range(0, len(images), 64):
            out += predict_batch(m, images[i:i + 64], 1)
        return [p["text"] for p in out]

    times = {"trained width": [], "buckets": []}
    texts = {}
    for _ in range(rounds + 1):  # the first round warms up
        for name, m in (("trained width", fixed), ("buckets", bucketed)):
            tic = time.perf_counter()
            texts[name] = run(m)
            times[name].append(time.perf_counter() - tic)
    rate = {k: len(images) * rounds / sum(v[1:]) for k, v in times.items()}
    for name in times:
        s = scores(truths, texts[name])
        click.echo(f"  {name:14s} CER {s['cer']:.4f}  line accuracy {s['line_accuracy']:.4f}  "
                   f"{rate[name]:7.1f} lines/s")
    same = sum(a == b for a, b in zip(texts["trained width"], texts["buckets"], strict=True))
    click.echo(f"  buckets / trained width: {rate['buckets'] / rate['trained width']:.2f}x "
               f"lines/s; same text on {same} of {len(images)} lines")

    logits = [fixed.logits(images[i][None]) for i in range(len(images))]
    tic = time.perf_counter()
    greedy_texts = [beam(x, meta["charset"], 1)[0][0] for x in logits]
    greedy_s = time.perf_counter() - tic
    tic = time.perf_counter()
    beam_texts = [beam(x, meta["charset"], width)[0][0] for x in logits]
    beam_s = time.perf_counter() - tic
    for name, got, secs in (("greedy", greedy_texts, greedy_s),
                            (f"beam {width}", beam_texts, beam_s)):
        s = scores(truths, got)
        click.echo(f"  {name:14s} CER {s['cer']:.4f}  line accuracy {s['line_accuracy']:.4f}  "
                   f"decode {1000 * secs / len(images):.2f} ms/line")
    click.echo(f"  beam {width} / greedy decode time: {beam_s / greedy_s:.1f}x; different text "
               f"on {sum(a != b for a, b in zip(greedy_texts, beam_texts, strict=True))} lines")


if __name__ == "__main__":
    main()
