"""What train.ema (the weight average, stages/lib/train/ema.py) does for each task's built-in
sample.

For each task: the sample is prepared once, then trained and evaluated by the real stages with
train.ema 0 (the last weights) and with each --decay, at the sample's own recipe otherwise.
Prints the task's headline test metric (classification accuracy, detection mAP50 and mAP50-95,
segmentation foreground mIoU, OCR CER: lower is better) and the train stage's CPU seconds.

    python -m bench.ema [--task classification --task ocr ...] [--decay 0.99 --decay 0.998]
"""
from pathlib import Path

import click


TASKS = ("classification", "detection", "segmentation", "ocr")


@click.command()
@click.option("--task", "tasks", multiple=True, type=click.Choice(TASKS), default=TASKS,
              show_default=True, help="Tasks to run (each its built-in sample).")
@click.option("--decay", "decays", multiple=True, type=float, default=(0.99,),
              show_default=True, help="train.ema values compared with 0 (off).")
@click.option("--epochs", type=int, default=0, help="train.epochs for every run; 0 = each "
              "sample's recipe.")
@click.option("--workdir", default="/tmp/bench-ema", show_default=True,
              help="Where the prepared samples and the runs go.")
def main(tasks, decays, epochs, workdir):
    from bench.stage_runs import load, prepared, run
    from stages.tasks import get

    print(f"load average {load()}")
    print(f"{'task':<15} {'train.ema':>9} {'train CPU s':>11}  test metric", flush=True)
    for name in tasks:
        task = get(name)
        params = {"task": name, **getattr(task, "sample_params", {})}
        project = prepared(Path(workdir) / name, params)
        for decay in (0.0, *decays):
            m = run(project, f"ema-{decay}", {"train.ema": decay,
                                              **({"train.epochs": epochs} if epochs else {})})
            shown = {"detection": ("map50", "map"), "ocr": ("cer",)}.get(
                name, (task.headline_metric,))
            print(f"{name:<15} {decay:>9} {m['cpu']:>11.0f}  "
                  + ", ".join(f"{k} {m[k]:.4f}" for k in shown), flush=True)
    print(f"load average {load()}")


if __name__ == "__main__":
    main()
