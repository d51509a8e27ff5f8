"""An exponential moving average (EMA) of a model's weights, for every task (train.ema).

After each optimiser step the average moves towards the trained weights:
ema = d * ema + (1 - d) * weights, with d = min(train.ema, (1 + step) / (10 + step)), so the
first steps are not held back by the random start (TensorFlow's num_updates rule). The
floating-point tensors that a training checkpoint holds are averaged (every parameter and
BatchNorm's running statistics; with LoRA, the trainable ones and the buffers); integer
buffers (BatchNorm's batch count) are copied. The average is what validation scores, what
best.pt's epoch is picked by, and what becomes models/model.pt (so evaluate, export, predict
and serve all use it); the optimiser keeps training the raw weights. It is checkpointed with
them, so a resumed run averages on from the same bytes.
"""
import contextlib


def bare(model):
    """The model inside a DDP wrapper (or the model itself)."""
    return getattr(model, "module", model)


class EMA:
    """The average over model's state_dict entries `keys`; every method takes the model as
    training holds it (DDP-wrapped or not)."""

    def __init__(self, model, decay: float, keys):
        """keys: the state_dict entries to average (stages/lib/train/finetune.py
        checkpoint_state's)."""
        import torch

        self.decay = float(decay)
        state = bare(model).state_dict()
        with torch.no_grad():
            self.state = {k: state[k].detach().clone() for k in sorted(keys)}

    def factor(self, step: int) -> float:
        return min(self.decay, (1 + step) / (10 + step))

    def update(self, model, step: int) -> None:
        """Move the average towards model's weights after optimiser step `step` (1-based)."""
        import torch

        d = self.factor(step)
        state = bare(model).state_dict()
        with torch.no_grad():
            for k, avg in self.state.items():
                now = state[k].detach()
                if avg.is_floating_point():
                    avg.lerp_(now, 1.0 - d)
                else:
                    avg.copy_(now)

    def state_dict(self) -> dict:
        return {"decay": self.decay, "state": self.state}

    def load_state_dict(self, saved: dict) -> None:
        import torch

        if sorted(saved["state"]) != sorted(self.state):
            from stages.lib.io import StageError

            raise StageError("models/checkpoints: the checkpoint's weight average does not fit "
                             "the model; delete models/checkpoints/ and re-run `dvc repro`.")
        with torch.no_grad():
            for k, avg in self.state.items():
                avg.copy_(saved["state"][k])

    def copy_to(self, model) -> None:
        """Load the average into model (for good: the weights that become model.pt)."""
        bare(model).load_state_dict(self.state, strict=False)

    @contextlib.contextmanager
    def applied(self, model):
        """The average in model for the block (validation), the trained weights after."""
        import torch

        with torch.no_grad():
            kept = {k: v.detach().clone() for k, v in bare(model).state_dict().items()
                    if k in self.state}
        self.copy_to(model)
        try:
            yield model
        finally:
            bare(model).load_state_dict(kept, strict=False)


def build(model, p):
    """The EMA that train.ema asks for (None when it is 0) over model (DDP unwrapped)."""
    if not p.ema:
        return None
    from stages.lib.train.finetune import checkpoint_state

    return EMA(model, p.ema, checkpoint_state(bare(model), p).keys())


def applied(run):
    """run's (stages/lib/train/loop.py Run) EMA applied to its model for the block, or nothing when
    there is none."""
    if run.ema is None:
        return contextlib.nullcontext()
    return run.ema.applied(run.model)
