"""Train the image classifier on data/processed/ and write models/model.pt.

Randomness is a pure function of (seed, epoch): the weights come from train.seed and each
epoch's order from a generator seeded by (seed, epoch), so the same inputs give the same bytes.
Per-epoch train loss, val loss, val accuracy and learning rate are logged with dvclive.
"""
from pathlib import Path

import click

from stages.lib.io import write_json
from stages.lib.params import load, params_option

MODEL = Path("models/model.pt")
METRICS = Path("metrics/train.json")
LIVE_DIR = Path("plots/train")


def epoch_order(n: int, seed: int, epoch: int):
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g)


def make_optimizer(p, model):
    import torch

    from stages.lib.io import StageError

    if p.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=p.weight_decay)
    if p.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=p.lr, momentum=0.9,
                               weight_decay=p.weight_decay, nesterov=True)
    raise StageError(f"train.optimizer: unknown {p.optimizer!r}; use adamw or sgd.")


def evaluate_loss(model, x, y, batch_size=512):
    """(mean cross-entropy, accuracy) of model on tensors x, y."""
    import torch
    import torch.nn.functional as F

    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            logits = model(x[i:i + batch_size])
            loss += F.cross_entropy(logits, y[i:i + batch_size], reduction="sum").item()
            correct += (logits.argmax(1) == y[i:i + batch_size]).sum().item()
    return loss / len(x), correct / len(x)


def train(p, x_train, y_train, x_val, y_val, meta, log=None):
    """Train and return (model, history); `log(epoch, record)` is called after each epoch."""
    import torch
    import torch.nn.functional as F

    from stages.lib.models import build_model

    torch.manual_seed(p.seed)
    torch.use_deterministic_algorithms(True)
    model = build_model(p.model, len(meta["classes"]), meta["channels"])
    opt = make_optimizer(p, model)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=p.epochs)
    history = []
    for epoch in range(p.epochs):
        model.train()
        order = epoch_order(len(x_train), p.seed, epoch)
        lr = opt.param_groups[0]["lr"]
        total = 0.0
        for i in range(0, len(order), p.batch_size):
            idx = order[i:i + p.batch_size]
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        sched.step()
        val_loss, val_acc = evaluate_loss(model, x_val, y_val)
        record = {"epoch": epoch + 1, "train_loss": total / len(order), "val_loss": val_loss,
                  "val_acc": val_acc, "lr": lr}
        history.append(record)
        if log:
            log(epoch, record)
    return model, history


@click.command()
@params_option
def main(params_path):
    """Train on data/processed/ and write models/model.pt, metrics/train.json and plots/train/.

    Reads `train.{model,epochs,batch_size,lr,optimizer,weight_decay,seed}` from the params file.
    """
    p = load("train", params_path)
    import torch
    from dvclive import Live

    from stages.lib.images import load_processed
    from stages.lib.models import save_model
    from stages.lib.provenance import run_record, write_run_record

    write_run_record("train", run_record("train", p))
    x_train, y_train, meta = load_processed("train")
    x_val, y_val, _ = load_processed("val")
    tensors = [torch.from_numpy(a) for a in (x_train, y_train, x_val, y_val)]

    with Live(dir=str(LIVE_DIR), dvcyaml=None, save_dvc_exp=False) as live:
        def log(epoch, rec):
            live.log_metric("train/loss", rec["train_loss"])
            live.log_metric("val/loss", rec["val_loss"])
            live.log_metric("val/acc", rec["val_acc"])
            live.log_metric("lr", rec["lr"])
            live.next_step()
            click.echo(f"epoch {rec['epoch']}/{p.epochs}: train loss {rec['train_loss']:.4f} "
                       f"val loss {rec['val_loss']:.4f} val acc {rec['val_acc']:.4f}")

        model, history = train(p, *tensors, meta, log=log)

    model_meta = {k: meta[k] for k in ("classes", "image_size", "channels", "mean", "std")}
    save_model(MODEL, model, {**model_meta, "model": p.model})
    last = history[-1]
    write_json(METRICS, {"epochs": len(history), "train_loss": last["train_loss"],
                         "val_loss": last["val_loss"], "val_acc": last["val_acc"]})
    click.echo(f"train: val acc {last['val_acc']:.4f} -> {MODEL}")


if __name__ == "__main__":
    main()
