"""train.deterministic: torch's deterministic algorithms, and a check before the first step that
the task's train and validation steps have a deterministic kernel for every op on this device.

On the CPU every op the tasks use is deterministic. On CUDA some of torch's kernels are not
(they add with atomics), and under `torch.use_deterministic_algorithms(True)` such an op raises
"X does not have a deterministic implementation" when it first runs: in the middle of the first
step, or at the end of the first epoch when only validation uses it. The tasks compute their
losses without such ops (segmentation's pixel cross-entropy as a one-hot sum, OCR's CTC on the
CPU); for a model that still needs one (an op torch lists as having no deterministic CUDA
kernel), `preflight` runs one train batch and one validation batch before any step, and stops
with one line naming the op, the task and the param to set, never a torch traceback. The
preflight leaves no trace: the weights, BatchNorm statistics, gradients and random generators
are put back as they were, so a run with it gives the same bytes as one without.
"""
import contextlib
import os

MARK = "does not have a deterministic implementation"


def set_deterministic(on: bool) -> None:
    import torch

    if on:  # cuBLAS reads this when CUDA initialises
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(on)
    torch.backends.cudnn.deterministic = on
    torch.backends.cudnn.benchmark = not on


def nondeterministic_op(exc: BaseException) -> str:
    """The op torch named in a "does not have a deterministic implementation" error ("" for
    any other error)."""
    before, found, _ = str(exc).partition(MARK)
    if not found:
        return ""
    words = before.split()
    return words[-1] if words else "an op"


def message(op: str, task: str, model: str, device: str) -> str:
    import torch

    return (f"train: {op} has no deterministic kernel on {device} (torch {torch.__version__}), "
            f"and task {task} with train.model {model} needs it. Set train.deterministic: "
            f"false to train on {device} anyway (then the weights differ from run to run), or "
            f"train.device: cpu (deterministic, slower).")


@contextlib.contextmanager
def untouched(model):
    """Whatever runs inside leaves model's state_dict, its gradients and torch's random
    generators (CPU and CUDA) as they were."""
    import torch

    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    grads = [(q, None if q.grad is None else q.grad.detach().clone())
             for q in model.parameters()]
    rng = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        with torch.no_grad():
            model.load_state_dict(state)
        for q, g in grads:
            q.grad = g
        torch.set_rng_state(rng)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def preflight(step, validate, model, task: str, model_name: str, device: str) -> str:
    """Run step() (one train batch's forward, loss and backward) and validate() (one
    validation batch's forward and sums) and undo their effects on model; the message for
    the first op without a deterministic kernel, "" when every op has one."""
    try:
        with untouched(model):
            step()
            validate()
    except RuntimeError as exc:
        op = nondeterministic_op(exc)
        if not op:
            raise
        return message(op, task, model_name, device)
    return ""
