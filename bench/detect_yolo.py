"""Ultralytics YOLOv8n on the built-in detection sample, scored by our evaluator: the yardstick
that `python -m bench.detect --quality` is read against.

Not part of the project's install: Ultralytics is AGPL-3.0 and pulls in OpenCV. Put it beside
the project's venv without touching it, then run this file with the venv's Python:

    pip install --target /tmp/yolo-pkgs --no-deps ultralytics==8.4.190 ultralytics-thop \
        opencv-python-headless py-cpuinfo polars
    PYTHONPATH=/tmp/yolo-pkgs YOLO_OFFLINE=1 python -m bench.detect_yolo [--epochs 30]

The sample is written as the sample stage writes it (1,000 images, 160 px, its train/val/test
split), YOLOv8n is built from its yaml (no weights) and trained at 160 px, batch 16, on the CPU,
then the test split is predicted (score >= 0.001, NMS IoU 0.7, up to 300 boxes) and scored by
stages/tasks/detection/metrics.py coco_map, the one evaluate uses (faster-coco-eval). Prints
the training's CPU seconds (user + system of this process and its children) beside mAP50,
mAP50-95, mAP75, small and medium AP.
"""
from pathlib import Path

import click


def cpu_seconds() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@click.command()
@click.option("--epochs", default=30, show_default=True, help="YOLOv8n training epochs.")
@click.option("--workdir", default="/tmp/bench-detect-yolo", show_default=True,
              help="Where the sample, YOLO's run folder and its data.yaml go.")
def main(epochs, workdir):
    import os

    import numpy as np
    import yaml
    from ultralytics import YOLO

    from stages.tasks.detection.metrics import coco_map
    from stages.tasks.detection.sample import NAMES, SIZE, shapes

    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    # Ultralytics' DVCLive callback saves a DVC experiment of the repository around the
    # working directory: run outside this one, it finds none and saves nothing
    os.chdir(workdir)
    root = workdir / "sample"
    if not (root / "images" / "test").is_dir():
        for rel, data in shapes(1000):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
    config = Path(workdir) / "data.yaml"
    config.write_text(yaml.safe_dump({
        "path": str(root), "train": "images/train", "val": "images/val", "test": "images/test",
        "names": dict(enumerate(NAMES))}))
    before = cpu_seconds()
    model = YOLO("yolov8n.yaml")
    model.train(data=str(config), imgsz=SIZE, epochs=epochs, batch=16, device="cpu",
                workers=0, plots=False, amp=False, project=str(Path(workdir) / "runs"),
                name=f"e{epochs}", exist_ok=True, seed=0, deterministic=True, verbose=False)
    cpu = cpu_seconds() - before
    model = YOLO(str(Path(workdir) / "runs" / f"e{epochs}" / "weights" / "last.pt"))
    dets, truths = [], []
    for image in sorted((root / "images" / "test").glob("*.png")):
        found = model.predict(str(image), imgsz=SIZE, conf=0.001, iou=0.7, max_det=300,
                              verbose=False)[0].boxes
        dets.append(np.concatenate([found.xyxy.numpy(), found.conf.numpy()[:, None],
                                    found.cls.numpy()[:, None]], 1).astype(np.float32))
        rows = [[float(v) for v in line.split()] for line in
                (root / "labels" / "test" / f"{image.stem}.txt").read_text().splitlines()]
        truths.append(np.array([[c, (x - w / 2) * SIZE, (y - h / 2) * SIZE, (x + w / 2) * SIZE,
                                 (y + h / 2) * SIZE] for c, x, y, w, h in rows],
                               np.float32).reshape(-1, 5))
    m = coco_map(dets, truths, len(NAMES))
    print(f"YOLOv8n, {epochs} epochs: train CPU s {cpu:.0f}, mAP50 {m['map50']:.4f}, mAP50-95 "
          f"{m['map']:.4f}, mAP75 {m['map75']:.4f}, small {m['map_small']:.4f}, medium "
          f"{m['map_medium']:.4f}")


if __name__ == "__main__":
    main()
