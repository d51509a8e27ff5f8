"""LoRA against full fine-tuning at convergence, in process (the train stage's own setup() and
fit(), without DVC around each run, so the four trainings fit in minutes):

a resnet18 trained on digits 0-4 (--start-epochs) is saved as a model.pt; from it, on all 10
digits for --epochs each: full fine-tuning, LoRA with the defaults (rank 8, alpha 16), LoRA with
the recipe of docs/fine-tuning.md (rank 16, alpha 32) and LoRA with a 5x rate for the adapters only
(train.lr_backbone). Prints the test accuracy of each, its gap to full fine-tuning in points,
the trainable share and the validation curve.

    python -m bench.lora_recipe [--epochs 15] [--start-epochs 5] [--threads 1]

The digits sample is prepared by `dvc repro prepare` in a temp copy of the project. Same inputs,
same --threads: the same figures (bench/finetune.py runs the comparison through `dvc repro`).
"""
import dataclasses
import os
import tempfile
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent

RUNS = {  # name: train params over the resnet18 fine-tuning
    "full fine-tuning": {},
    "LoRA r8 a16 (defaults)": {"adapter": "lora"},
    "LoRA r16 a32 (recipe)": {"adapter": "lora", "lora_rank": 16, "lora_alpha": 32.0},
    "LoRA r8, lr_backbone 5x": {"adapter": "lora", "lr_backbone": 0.015},
}


@click.command()
@click.option("--epochs", default=15, show_default=True, help="fine-tuning epochs (10 classes)")
@click.option("--start-epochs", default=5, show_default=True,
              help="epochs of the 5-class resnet18 they all start from")
@click.option("--threads", default=1, show_default=True, help="torch threads")
def main(epochs, start_epochs, threads):
    """LoRA recipes against full fine-tuning (see the module docstring)."""
    import torch

    from stages.lib.train import loop as T
    from stages.lib.train.determinism import set_deterministic
    from stages.lib.data.shards import load_split
    from stages.lib.model.models import save_model
    from stages.lib.params import load
    from stages.tasks import get
    from tools.project import copy_project, dvc

    torch.set_num_threads(threads)
    task = get("classification")
    with tempfile.TemporaryDirectory(prefix="bench-lora-") as tmp:
        project = copy_project(ROOT, Path(tmp) / "digits")
        dvc(project, "repro", "prepare")
        here = os.getcwd()
        os.chdir(project)
        try:
            splits = [load_split(s, torch=True) for s in ("train", "val", "test")]
            meta = splits[0][2]
            (xtr, ytr), (xva, yva), (xte, yte) = ((x[0:len(x)], y[0:len(y)])
                                                  for x, y, _ in splits)
            base = dataclasses.replace(load("train", "params.yaml"), model="resnet18")
        finally:
            os.chdir(here)
        set_deterministic(True)

        def train(p, data, m):
            tic = time.perf_counter()
            run = T.setup(p, m, task)
            T.fit(p, run, data)
            return run, time.perf_counter() - tic

        five, five_val = ytr < 5, yva < 5
        meta5 = {**meta, "classes": meta["classes"][:5]}
        run, _ = train(dataclasses.replace(base, epochs=start_epochs),
                       (xtr[five], ytr[five], xva[five_val], yva[five_val]), meta5)
        start = Path(tmp) / "resnet5.pt"
        save_model(start, run.model, {**meta5, "model": "resnet18"})
        print(f"start: resnet18, {start_epochs} epochs on digits 0-4, val accuracy "
              f"{run.state['history'][-1]['val_acc']:.3f}", flush=True)
        results = {}
        for name, knobs in RUNS.items():
            p = dataclasses.replace(base, epochs=epochs, init_from=str(start), **knobs)
            run, seconds = train(p, (xtr, ytr, xva, yva), meta)
            model = run.model.eval()
            with torch.no_grad():
                acc = float((model(xte).argmax(1) == yte).float().mean())
            results[name] = acc
            facts = run.facts
            curve = " ".join(f"{r['val_acc']:.3f}" for r in run.state["history"])
            gap = 100 * (acc - results["full fine-tuning"])
            n, total = facts["params_trainable"], facts["params_total"]
            print(f"{name:24s} test accuracy {acc:.4f} ({gap:+.1f} points)  trainable "
                  f"{n:,} / {total:,} ({n / total:.1%})  {seconds:.0f} s\n"
                  f"{'':24s} val accuracy per epoch: {curve}", flush=True)


if __name__ == "__main__":
    main()
