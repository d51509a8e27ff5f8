"""Detection box quality per CPU second (`python -m bench.detect --quality`).

Trains the built-in detection sample (1,000 images, its fixed split, at the recipe's size or
--image-size) with the real train stage, then scores the test split with the real evaluate
stage (COCO mAP through faster-coco-eval): mAP50, mAP50-95, mAP75 and AP of small (< 32 x 32
px) and medium objects, beside the train stage's CPU seconds (user + system of the
`python -m stages.train` process, both threads). One line per run:

- `full`: the sample's recipe as it ships (train.ema and train.aug_zoom_out on);
- each ablation takes one change away from `full`, so its gap to `full` is what that change
  adds: `-ema` (train.ema 0: the last weights), `-zoom` (train.aug_zoom_out 1: no shrunk
  images);
- `none`: both away (the recipe before them).

Budgets: `recipe` (the sample's train.epochs) and any number of epochs (30: the budget the
issue compared with YOLOv8n at); the ablations run at the --ablate-at budgets only. The
sample is prepared once in --workdir; each run is a folder beside it sharing its data/ and this
checkout's code (bench/stage_runs.py), so a run changes nothing here. YOLOv8n on the same
sample, scored by the same evaluator: bench/detect_yolo.py.

    python -m bench.detect --quality [--budget 30 --budget recipe] [--ablate-at 30]
                           [--image-size 224 --workdir /tmp/bench-detect-224]
"""
from pathlib import Path

# each variant: the train params it changes from the recipe
VARIANTS = {
    "full": {},
    "-ema": {"train.ema": 0.0},
    "-zoom": {"train.aug_zoom_out": 1.0},
    "none": {"train.ema": 0.0, "train.aug_zoom_out": 1.0},
}


def main(budgets, ablate_at, workdir, image_size=None):
    from bench.stage_runs import load, prepared, run
    from stages.tasks.detection import Detection

    params = {"task": "detection", **Detection.sample_params}
    if image_size:
        params["prepare.image_size"] = image_size
    project = prepared(Path(workdir), params)
    recipe = Detection.recipe["train.epochs"]
    print(f"detection sample, {params['prepare.image_size']} px, recipe {recipe} epochs, train.ema "
          f"{Detection.recipe['train.ema']}, train.aug_zoom_out "
          f"{Detection.recipe['train.aug_zoom_out']}; load average {load()}")
    print(f"{'run':<10} {'epochs':>6} {'train CPU s':>11} {'mAP50':>7} {'mAP50-95':>8} "
          f"{'mAP75':>7} {'small':>7} {'medium':>7}", flush=True)
    for budget in budgets:
        epochs = recipe if budget == "recipe" else int(budget)
        for name in (list(VARIANTS) if budget in ablate_at else ["full"]):
            m = run(project, f"{name}-{epochs}", {"train.epochs": epochs, **VARIANTS[name]})
            print(f"{name:<10} {epochs:>6} {m['cpu']:>11.0f} {m['map50']:>7.4f} "
                  f"{m['map']:>8.4f} {m['map75']:>7.4f} {m['map_small']:>7.4f} "
                  f"{m['map_medium']:>7.4f}", flush=True)
    print(f"load average {load()}")
