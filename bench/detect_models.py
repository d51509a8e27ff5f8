"""Train-step throughput of the detectors by name (train.model) against centernet_small, in
the same run: torchvision's fasterrcnn_mobilenet_v3_large_320_fpn and
ssdlite320_mobilenet_v3_large (and with --all fcos_resnet50_fpn, retinanet_resnet50_fpn),
from scratch, at the built-in sample's 160 px, batch 8 by default.

One step is what the train stage does per batch: models.forward_loss (torchvision's: the
targets inside the forward, the loss dict summed), backward, AdamW step. The models take turns
step by step (round robin), so this machine's drifting speed hits them alike; the first round
is warm-up. Prints each model's images/s (median over the timed rounds), its ratio to
centernet_small's, its parameter count, and `uptime`'s load.

    nice -n 19 python -m bench.detect_models [--rounds 6] [--batch 8] [--all]
"""
import os
import statistics
import time

import click


BASELINE = "centernet_small"
TORCHVISION = ["fasterrcnn_mobilenet_v3_large_320_fpn", "ssdlite320_mobilenet_v3_large"]
RESNET50 = ["fcos_resnet50_fpn", "retinanet_resnet50_fpn"]


@click.command()
@click.option("--rounds", default=6, show_default=True, help="Timed rounds (+1 warm-up).")
@click.option("--batch", default=8, show_default=True, help="Images per step.")
@click.option("--size", default=160, show_default=True, help="Input side, pixels.")
@click.option("--all", "every", is_flag=True, help="Also the two ResNet-50 detectors.")
@click.option("--threads", default=2, show_default=True)
def main(rounds, batch, size, every, threads):
    import numpy as np
    import torch

    from stages.lib.model.models import forward_loss
    from stages.lib.params import Train
    from stages.tasks.detection import TASK, Detection
    from stages.tasks.detection.sample import SIZE, draw
    from stages.lib.train.determinism import set_deterministic
    from stages.lib.train.loop import make_optimizer

    torch.set_num_threads(threads)
    sp = Detection.sample_params
    p = Train(**{k.split(".", 1)[1]: v for k, v in sp.items() if k.startswith("train.")})
    set_deterministic(p.deterministic)
    pixels, targets = [], []
    for i in range(batch):  # the sample's images (160 px), resized when --size differs
        img, boxes = draw(i)
        t = np.full((8, 5), -1, np.float32)
        t[:len(boxes)] = np.array(boxes, np.float32).reshape(-1, 5)
        t[:len(boxes), 1:] *= size / SIZE
        pixels.append(img)
        targets.append(t)
    x = torch.from_numpy((np.stack(pixels).astype(np.float32) / 255 - 0.5) / 0.25).permute(
        0, 3, 1, 2).contiguous()
    if size != SIZE:
        x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear")
    y = torch.from_numpy(np.stack(targets))
    meta = {"classes": ["circle", "square", "triangle"], "max_boxes": 8, "channels": 3,
            "image_size": size}
    names = [BASELINE, *TORCHVISION, *(RESNET50 if every else [])]
    models, opts, times = {}, {}, {n: [] for n in names}
    for name in names:
        torch.manual_seed(0)
        models[name] = TASK.build_model(name, meta).train()
        opts[name] = make_optimizer(p, models[name])
    for r in range(rounds + 1):
        for name in names:
            tic = time.perf_counter()
            loss = forward_loss(models[name], x, y, TASK.loss, p)
            opts[name].zero_grad(set_to_none=True)
            loss.backward()
            opts[name].step()
            if r:  # round 0 is warm-up
                times[name].append(time.perf_counter() - tic)
    base = batch / statistics.median(times[BASELINE])
    print(f"train step, batch {batch}, {size} px, {threads} threads, {rounds} timed rounds:")
    for name in names:
        rate = batch / statistics.median(times[name])
        params = sum(q.numel() for q in models[name].parameters())
        print(f"  {name:40s} {rate:7.2f} img/s  {rate / base:6.3f}x {BASELINE}  "
              f"{params / 1e6:5.2f}M parameters")
    print("load average:", " ".join(f"{v:.2f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
