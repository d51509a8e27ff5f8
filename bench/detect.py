"""Detection throughput, each against a baseline measured in the same run:

1. the train stage's loop (stages.lib.train.loop.fit with the detection task and the built-in
sample's
   params: per-sample augmentation moving boxes, NaN checks, LR schedule) against a bare loop of
   the same model (forward, loss, backward, step on the same samples, no augmentation). The two
   take turns step by step (bench/paired.py), so this machine's drifting speed hits both alike;
   the first epoch is warm-up. Prints images/s of each and the ratio stage/bare (target >= 0.95;
   --no-aug switches the stage's augmentation off too, to see the loop's own overhead);
2. inference of the exported ONNX graph in onnxruntime against PyTorch eager, same images,
   same batch size: images/s and their ratio.

The images are the built-in sample's (drawn in memory), at the sample's params. Prints
`uptime`'s load so a reader can judge the machine.

    python -m bench.detect [--images 128] [--epochs 2] [--no-aug]

3. with --quality, box quality per CPU second instead (bench/detect_quality.py): the real
   train and evaluate stages on the sample at each --budget, mAP50, mAP50-95, mAP75, small and
   medium AP and the train stage's CPU seconds, one line per ablation.

    python -m bench.detect --quality [--budget 30 --budget recipe] [--ablate-at 30]
"""
import dataclasses
import os
import time

import click


@click.command()
@click.option("--images", default=128, show_default=True, help="Train images (in memory).")
@click.option("--epochs", default=2, show_default=True, help="Timed epochs (+1 warm-up).")
@click.option("--no-aug", is_flag=True, help="Augmentation off in the stage's loop too.")
@click.option("--threads", default=2, show_default=True)
@click.option("--quality", is_flag=True,
              help="Box quality instead of speed: train and evaluate the sample per budget and "
                   "ablation (bench/detect_quality.py).")
@click.option("--budget", "budgets", multiple=True, default=("30", "recipe"), show_default=True,
              help="--quality: train epochs per run, or `recipe` (the sample's).")
@click.option("--ablate-at", multiple=True, default=("30",), show_default=True,
              help="--quality: at these budgets also one run per change taken away, and one "
                   "with none (none: pass --ablate-at '').")
@click.option("--workdir", default="/tmp/bench-detect-quality", show_default=True,
              help="--quality: where the prepared sample and the runs go.")
@click.option("--image-size", type=int, default=None,
              help="--quality: prepare.image_size for every run (default: the sample's "
                   "recipe's, 224; its images are 160 px). Boxes are scored in input pixels, "
                   "so `small` (< 32 x 32) means other objects at another size; mAP50-95 is "
                   "scale-free. A --workdir prepared at another size is prepared again.")
def main(images, epochs, no_aug, threads, quality, budgets, ablate_at, workdir, image_size):
    if quality:
        from bench.detect_quality import main as quality_main
        return quality_main(budgets, ablate_at, workdir, image_size)
    import numpy as np
    import torch

    from bench.paired import bare_steps, paired_fit, rates
    from stages.lib.train.determinism import set_deterministic
    from stages.lib.train.loop import make_optimizer, setup
    from stages.lib.model.models import forward_loss
    from stages.lib.params import Train
    from stages.tasks.detection import TASK, Detection
    from stages.tasks.detection.sample import draw

    torch.set_num_threads(threads)
    sp = Detection.sample_params
    train = {k.split(".", 1)[1]: v for k, v in sp.items() if k.startswith("train.")}
    p = Train(**{**train, "epochs": epochs + 1, "warmup_epochs": 0})
    if no_aug:
        p = dataclasses.replace(p, aug_hflip=0.0, aug_crop_scale=1.0, aug_jitter=0.0)
    pixels, targets = [], []
    for i in range(images):
        img, boxes = draw(i)
        t = np.full((8, 5), -1, np.float32)
        t[:len(boxes)] = np.array(boxes, np.float32).reshape(-1, 5)
        pixels.append(img)
        targets.append(t)
    x = torch.from_numpy((np.stack(pixels).astype(np.float32) / 255 - 0.5) / 0.25).permute(
        0, 3, 1, 2).contiguous()
    y = torch.from_numpy(np.stack(targets))
    meta = {"classes": ["circle", "square", "triangle"], "max_boxes": 8, "channels": 3,
            "image_size": 160}
    set_deterministic(p.deterministic)
    run = setup(p, meta, TASK)
    torch.manual_seed(p.seed)
    bare = TASK.build_model(p.model, meta).train()
    opt = make_optimizer(p, bare)

    bare_step = bare_steps(opt, lambda idx: forward_loss(bare, x[idx], y[idx], TASK.loss, p))

    steps = paired_fit(p, run, (x, y, x[:32], y[:32]), bare_step)
    stage, bare_rate = rates(steps[1:])
    print(f"train: {p.model}, batch {p.batch_size}, 160 px, {images} images, {epochs} timed "
          f"epochs; stage loop {stage:.1f} img/s (augmentation {'off' if no_aug else 'on'}), "
          f"bare loop {bare_rate:.1f} img/s, ratio {stage / bare_rate:.3f} (target >= 0.95)")

    import onnxruntime as ort

    from stages.lib.model.formats import onnx_bytes

    model = run.model.eval()
    blob = onnx_bytes(model, {**meta, "image_size": 160, "mean": [0.5] * 3, "std": [0.25] * 3},
                      TASK)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    session = ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"])
    xs = x.numpy()
    times = {"onnxruntime": 0.0, "torch": 0.0}
    for rep in range(3):
        for name in times:
            tic = time.perf_counter()
            for b in range(0, images, 32):
                if name == "torch":
                    with torch.no_grad():
                        model(x[b:b + 32])
                else:
                    session.run(None, {"input": xs[b:b + 32]})
            if rep:
                times[name] += time.perf_counter() - tic
    n = images * 2
    print(f"predict: onnxruntime {n / times['onnxruntime']:.1f} img/s, torch eager "
          f"{n / times['torch']:.1f} img/s, ratio {times['torch'] / times['onnxruntime']:.2f}")
    print("load average:", " ".join(f"{v:.2f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
