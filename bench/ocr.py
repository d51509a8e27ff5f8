"""OCR: the train stage's loop against a bare CTC loop, and onnxruntime against PyTorch for
predict.

Training: the ocr task's CRNN and CTC loss on random lines of the sample's shape (1 x 32 x 192,
texts of 3-12 characters over 87 classes) held in memory, with the ocr sample's train params
except augmentation (off in both loops: the bench measures the loop, not the augmentation).
As bench/train.py, the loops take turns step by step (each stage step is timed next to a bare
one on the same samples, so the machine's drifting speed hits both alike); the first epoch is
warm-up. Target: stage / bare >= 0.95.

Predict: the same untrained CRNN exported to ONNX (stages.lib.model.formats.onnx_bytes), then
batches of
lines through onnxruntime and through PyTorch eager (no grad), alternating, plus the shared
greedy decoding; prints lines/s of each and the ratio onnxruntime / PyTorch.

    python -m bench.ocr [--epochs 3] [--samples 512] [--threads 2]
"""
import dataclasses
import statistics
import time

import click


@click.command()
@click.option("--epochs", default=3, show_default=True, help="Timed epochs (+1 warm-up).")
@click.option("--samples", default=512, show_default=True, help="Train lines in memory.")
@click.option("--threads", default=0, show_default=True, help="torch threads; 0 = default.")
@click.option("--predict-rounds", default=5, show_default=True)
def main(epochs, samples, threads, predict_rounds):
    import torch

    from bench.paired import bare_steps, paired_fit, rates
    from stages.lib.params import Train
    from stages.tasks.ocr import TASK
    from stages.lib.train.determinism import set_deterministic
    from stages.lib.train.loop import make_optimizer, setup

    if threads:
        torch.set_num_threads(threads)
    train = {k.split(".", 1)[1]: v for k, v in TASK.sample_params.items()
             if k.startswith("train.")}
    p = dataclasses.replace(Train(**train), epochs=epochs + 1, warmup_epochs=0, aug_rotate=0.0,
                            aug_stretch=0.0, aug_blur=0.0, aug_jitter=0.0)
    g = torch.Generator().manual_seed(0)
    charset = [chr(33 + i) for i in range(87)]
    meta = {"charset": charset, "blank": 0, "max_len": 12, "channels": 1,
            "image_size": [32, 192], "mean": [0.5], "std": [0.5]}
    x = torch.randn(samples, 1, 32, 192, generator=g)
    lengths = torch.randint(3, 13, (samples,), generator=g)
    codes = torch.randint(1, 88, (samples, 12), generator=g)
    codes[torch.arange(12)[None, :] >= lengths[:, None]] = 0
    y = torch.cat([lengths[:, None], codes], 1).int()
    set_deterministic(p.deterministic)
    run = setup(p, meta, TASK)
    torch.manual_seed(p.seed)
    bare_model = TASK.build_model("crnn", meta)
    bare_opt = make_optimizer(p, bare_model)
    bare_step = bare_steps(bare_opt, lambda idx: TASK.loss(bare_model(x[idx]), y[idx], p))

    bare_model.train()
    steps = paired_fit(p, run, (x, y, x[:64], y[:64]), bare_step)
    timed = [s for epoch in steps[1:] for s in epoch]
    stage, bare = rates(steps[1:])
    per_epoch = statistics.median(sum(b for _, b, _ in e) / sum(s for s, _, _ in e)
                                  for e in steps[1:])
    click.echo(f"train, threads {torch.get_num_threads()}, batch {p.batch_size}, {samples} "
               f"lines 32x192, {epochs} timed epochs ({len(timed)} step pairs)")
    click.echo(f"  stage loop: {stage:8.1f} lines/s   bare loop: {bare:8.1f} lines/s   "
               f"ratio {stage / bare:.3f} (median per epoch {per_epoch:.3f}; target >= 0.95)")

    import onnxruntime as ort

    from stages.lib.model.formats import onnx_bytes
    from stages.tasks.common.ctc import greedy

    model = run.model.eval()
    session = ort.InferenceSession(onnx_bytes(model, meta, TASK),
                                   providers=["CPUExecutionProvider"])
    batch = x[:64].numpy()
    times = {"onnxruntime": [], "torch": []}
    for _ in range(predict_rounds + 1):  # the first round warms up
        tic = time.perf_counter()
        greedy(session.run(None, {"input": batch})[0], charset)
        times["onnxruntime"].append(time.perf_counter() - tic)
        tic = time.perf_counter()
        with torch.no_grad():
            greedy(model(torch.from_numpy(batch)).numpy(), charset)
        times["torch"].append(time.perf_counter() - tic)
    rate = {k: len(batch) * predict_rounds / sum(v[1:]) for k, v in times.items()}
    click.echo(f"predict, batch {len(batch)}, {predict_rounds} timed rounds: onnxruntime "
               f"{rate['onnxruntime']:.1f} lines/s, torch {rate['torch']:.1f} lines/s, ratio "
               f"onnxruntime/torch {rate['onnxruntime'] / rate['torch']:.2f}")


if __name__ == "__main__":
    main()
