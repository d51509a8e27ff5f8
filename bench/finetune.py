"""Issue 15's acceptance figures on the built-in sample (digits, 16x16 grey), in a temp copy
of the project run with DVC:

1. Warm start: a small_cnn trained on 5 classes (digits 0-4), then all 10 classes from scratch
   and from that model (train.init_from): the head is re-initialised, the rest loaded; the
   per-epoch validation accuracy of both, and the epochs each needs to reach the from-scratch
   run's final accuracy.
2. LoRA against full fine-tuning: a torchvision resnet18 trained on the 5 classes
   (--resnet-start-epochs) is the starting point of all (same file); each trains on all 10
   classes (--resnet-epochs): full fine-tuning, LoRA with the defaults (rank 8, alpha 16) and
   LoRA with docs/fine-tuning.md's recipe (--lora-rank 16 --lora-alpha 32); test accuracy and the
   trainable share of the parameters.

    python -m bench.finetune [--epochs 15] [--resnet-epochs 15] [--only warm|lora]

Takes tens of minutes on 2 cores (seven trainings; --only lora: four).
"""
import json
import shutil
import tempfile
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent


def curve(project) -> list[float]:
    rows = (project / "plots/train/plots/metrics/val/acc.tsv").read_text().splitlines()[1:]
    return [float(r.split("\t")[1]) for r in rows]


def run(project, params, stages=("train", "evaluate")) -> dict:
    from tools.project import dvc, set_params

    set_params(project, params)
    tic = time.perf_counter()
    for stage in stages:
        dvc(project, "repro", stage)
    out = {"seconds": time.perf_counter() - tic, "curve": curve(project),
           "train": json.loads((project / "metrics/train.json").read_text())}
    if "evaluate" in stages:
        out["test_accuracy"] = json.loads((project / "metrics/eval.json").read_text())["accuracy"]
    print(f"   ({project.name}: {params} -> {json.dumps(out)})", flush=True)  # progress
    return out


@click.command()
@click.option("--epochs", default=15, show_default=True, help="small_cnn runs")
@click.option("--resnet-epochs", default=15, show_default=True,
              help="resnet18 fine-tuning runs (full and LoRA)")
@click.option("--resnet-start-epochs", default=5, show_default=True,
              help="the 5-class resnet18 they start from")
@click.option("--lora-rank", default=16, show_default=True, help="the recipe's train.lora_rank")
@click.option("--lora-alpha", default=32.0, show_default=True,
              help="the recipe's train.lora_alpha")
@click.option("--only", type=click.Choice(["warm", "lora"]), default=None,
              help="run one of the two comparisons")
def main(epochs, resnet_epochs, resnet_start_epochs, lora_rank, lora_alpha, only):
    """Warm start vs from scratch; LoRA vs full fine-tuning (see the module docstring)."""
    from tools.project import copy_project, dvc

    with tempfile.TemporaryDirectory(prefix="bench-finetune-") as tmp:
        five = copy_project(ROOT, Path(tmp) / "five")
        dvc(five, "repro", "sample")
        for digit in range(5):
            shutil.copytree(five / "data/sample" / str(digit), five / "data/five" / str(digit))
        base = {"data.source": "data/five", "train.epochs": epochs}
        proj = copy_project(ROOT, Path(tmp) / "all")
        if only != "lora":
            run(five, base, ("train",))
            (proj / "weights/small5.pt").write_bytes((five / "models/model.pt").read_bytes())
            scratch = run(proj, {"train.epochs": epochs})
            warm = run(proj, {"train.epochs": epochs, "train.init_from": "weights/small5.pt"})
            report_warm(epochs, scratch, warm)
        if only == "warm":
            return
        run(five, {**base, "train.model": "resnet18", "train.epochs": resnet_start_epochs},
            ("train",))
        (proj / "weights/resnet5.pt").write_bytes((five / "models/model.pt").read_bytes())
        resnet = {"train.model": "resnet18", "train.epochs": resnet_epochs,
                  "train.init_from": "weights/resnet5.pt"}
        full = run(proj, resnet)
        lora = run(proj, {**resnet, "train.adapter": "lora"})
        recipe = run(proj, {**resnet, "train.adapter": "lora", "train.lora_rank": lora_rank,
                            "train.lora_alpha": lora_alpha})
    print(f"2. resnet18 from the same 5-class weights ({resnet_start_epochs} epochs on digits "
          f"0-4), {resnet_epochs} epochs on 10 classes")
    for name, r in (("full fine-tuning", full), ("LoRA r8 a16", lora),
                    (f"LoRA r{lora_rank} a{lora_alpha:g}", recipe)):
        t = r["train"]
        print(f"   {name:17s} test accuracy {r['test_accuracy']:.4f}  trainable "
              f"{t['params_trainable']:,} / {t['params_total']:,} "
              f"({t['params_trainable'] / t['params_total']:.1%})  {r['seconds']:.0f} s")
        print(f"   {'':17s} val acc per epoch: {' '.join(f'{a:.3f}' for a in r['curve'])}")
        print(f"   {name} - full: "
              f"{100 * (r['test_accuracy'] - full['test_accuracy']):+.1f} points")


def report_warm(epochs, scratch, warm):
    def reach(c, target):
        return next((i + 1 for i, a in enumerate(c) if a >= target), None)

    target = scratch["curve"][-1]
    init = warm["train"]["init"]
    print(f"1. small_cnn, {epochs} epochs; warm start from the 5-class model: "
          f"{init['loaded']} tensors loaded, re-initialised {init['reinitialised']}, missing "
          f"{init['missing']}, unexpected {init['unexpected']}")
    for name, r in (("from scratch", scratch), ("from 5 classes", warm)):
        print(f"   {name:15s} val acc per epoch: {' '.join(f'{a:.3f}' for a in r['curve'])}")
        print(f"   {'':15s} reaches {target:.3f} (scratch's final val acc) at epoch "
              f"{reach(r['curve'], target)}; test accuracy {r['test_accuracy']:.4f}; "
              f"{r['seconds']:.0f} s")


if __name__ == "__main__":
    main()
