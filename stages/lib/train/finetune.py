"""Fine-tuning: what starts from where, what trains, at which rate; LoRA adapters.

setup_model() turns a freshly built (seeded) model into the one train runs: weights from
train.init_from (stages/lib/model/models.py init_from, with its report by name), frozen parameters
(train.freeze patterns, train.freeze_backbone), LoRA adapters (train.adapter: lora, with peft).
param_groups() gives the optimiser its groups (train.lr_backbone). The head is the task's
(Task.head); everything here is task-agnostic.

LoRA: every nn.Linear and every ungrouped, undilated nn.Conv1d/Conv2d outside the head (or
those matching train.lora_targets, else the task's Task.lora_targets) gets a rank-r adapter;
the base weights stay frozen, the head trains fully, BatchNorm trains or stays frozen
(train.lora_batchnorm). Only the trainable tensors and the buffers go into the training
checkpoint (checkpoint_state); the frozen base is rebuilt from the seed and train.init_from,
which the fingerprint covers. The model.pt that train writes holds the merged weights
(merge_and_unload): evaluate, export, predict and serve read a plain model.
"""
from fnmatch import fnmatchcase

from stages.lib.io import StageError


def matches(name: str, patterns) -> bool:
    """A module or parameter name matches a pattern itself or lies under a matching module."""
    return any(fnmatchcase(name, pat) or fnmatchcase(name, pat + ".*") for pat in patterns)


def lora_candidates(model, head: str) -> list[str]:
    """Module names LoRA can adapt and merge: nn.Linear and nn.Conv1d/Conv2d that are neither
    grouped (peft cannot merge grouped/depthwise convolutions) nor dilated (peft's adapter
    convolution drops the dilation, so its output would not fit), outside the head."""
    from torch import nn

    def plain_conv(m):
        return (isinstance(m, (nn.Conv1d, nn.Conv2d)) and m.groups == 1
                and all(d == 1 for d in m.dilation) and m.padding_mode == "zeros")

    return [name for name, m in model.named_modules()
            if (isinstance(m, nn.Linear) or plain_conv(m))
            and name != head and not name.startswith(head + ".")]


def batchnorms(model) -> list:
    from torch import nn

    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def setup_model(model, p, head: str, default_targets=()) -> tuple:
    """(model to train, facts for metrics/train.json, modules to keep in eval mode); head: the
    task's head module name (Task.head), needed only when finetuning(p); default_targets: the
    task's LoRA target patterns (Task.lora_targets) used when train.lora_targets is []."""
    import re

    from stages.lib.model.models import describe_init, init_from, no_weights

    facts, eval_modules = {}, []
    if not no_weights(p.init_from):
        report = init_from(model, p.init_from, p.freeze_backbone, p.init_strict, head)
        facts["init"] = report
        import click

        click.echo(f"train: {p.init_from} ({report['kind']}): {describe_init(report)}")
    if p.freeze:
        names = [n for n, _ in model.named_parameters()]
        unused = [pat for pat in p.freeze if not any(matches(n, [pat]) for n in names)]
        if unused:
            raise StageError(f"train.freeze: {', '.join(unused)} match(es) no parameter of "
                             f"{p.model} (e.g. {', '.join(names[:4])}).")
        for name, param in model.named_parameters():
            if matches(name, p.freeze):
                param.requires_grad_(False)
    if p.adapter == "lora":
        from peft import LoraConfig, get_peft_model

        patterns = list(p.lora_targets) or list(default_targets)
        targets = [n for n in lora_candidates(model, head)
                   if not patterns or matches(n, patterns)]
        if not targets:
            raise StageError(f"train.lora_targets: no nn.Linear or ungrouped, undilated "
                             f"nn.Conv1d/Conv2d of {p.model} outside its head ({head}) matches "
                             f"{patterns or 'the defaults'}.")
        bn_params = {id(q) for m in batchnorms(model) for q in m.parameters()}
        config = LoraConfig(r=p.lora_rank, lora_alpha=p.lora_alpha, lora_dropout=p.lora_dropout,
                            target_modules="^(" + "|".join(map(re.escape, targets)) + ")$",
                            bias="none")
        keep = {id(q) for n, q in model.named_parameters()
                if n.startswith(head + ".") and q.requires_grad}
        if p.lora_batchnorm == "trained":
            keep |= bn_params
        model = get_peft_model(model, config)  # freezes everything but the adapters
        for param in model.parameters():
            if id(param) in keep:
                param.requires_grad_(True)
        if p.lora_batchnorm == "frozen":
            eval_modules = batchnorms(model)
            for param in model.parameters():
                if id(param) in bn_params:
                    param.requires_grad_(False)
        facts["lora_targets"] = len(targets)
    if not any(q.requires_grad for q in model.parameters()):
        raise StageError("train.freeze / train.freeze_backbone leave nothing to train.")
    # total: the model's own parameters plus the adapters'
    facts["params_trainable"] = sum(q.numel() for q in model.parameters() if q.requires_grad)
    facts["params_total"] = sum(q.numel() for q in model.parameters())
    return model, facts, eval_modules


def plain_name(name: str) -> str:
    """A parameter's name in the plain model (without DDP's and peft's prefixes)."""
    return name.removeprefix("module.").removeprefix("base_model.model.")


def finetuning(p) -> bool:
    """Whether any fine-tuning knob is set: then metrics/train.json records its facts (the
    default run's file keeps its bytes)."""
    from stages.lib.model.models import no_weights

    return (not no_weights(p.init_from) or bool(p.freeze) or p.freeze_backbone
            or p.lr_backbone > 0 or p.adapter != "none")


def param_groups(model, p, head: str):
    """The optimiser's parameters: one list at train.lr, or with train.lr_backbone the head at
    train.lr and the rest at train.lr_backbone (the schedule scales both alike)."""
    trainable = [(n, q) for n, q in model.named_parameters() if q.requires_grad]
    if not p.lr_backbone:
        return [q for _, q in trainable]
    in_head = [q for n, q in trainable if plain_name(n).startswith(head + ".")]
    ids = {id(q) for q in in_head}
    rest = [q for _, q in trainable if id(q) not in ids]
    return [g for g in ({"params": in_head, "lr": p.lr}, {"params": rest, "lr": p.lr_backbone})
            if g["params"]]


def checkpoint_state(model, p) -> dict:
    """The model's part of a training checkpoint: everything, or with LoRA only the trainable
    tensors (adapters, head, trained BatchNorm) and the buffers."""
    state = model.state_dict()
    if p.adapter == "none":
        return state
    keep = {n for n, q in model.named_parameters() if q.requires_grad}
    keep |= {n for n, _ in model.named_buffers()}
    return {k: v for k, v in state.items() if k in keep}


def restore_state(model, state: dict, p) -> None:
    if p.adapter == "none":
        model.load_state_dict(state)
        return
    result = model.load_state_dict(state, strict=False)
    frozen = {n for n, q in model.named_parameters() if not q.requires_grad}
    if result.unexpected_keys or set(result.missing_keys) - frozen:
        raise StageError(f"models/checkpoints: the adapter checkpoint does not fit the model "
                         f"({(result.unexpected_keys + result.missing_keys)[:3]}).")


def merged(model, p, probe=None):
    """(the plain model to save, max |adapter model - merged model| logit on probe or None)."""
    import torch

    model = getattr(model, "module", model)
    if p.adapter == "none":
        return model, None
    diff = None
    if probe is not None:
        model.eval()
        with torch.no_grad():
            before = model(probe)
    plain = model.merge_and_unload()
    if probe is not None:
        plain.eval()
        with torch.no_grad():
            diff = float((plain(probe) - before).abs().max())
    return plain, diff
