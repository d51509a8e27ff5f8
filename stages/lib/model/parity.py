"""The export stage's parity gate: PyTorch's outputs against an exported model's, image by image.

`parity_gate` compares the reference outputs with each batch size's run: an image fails when its
largest output difference exceeds `atol + rtol * max|reference|` or the task's decision differs
(Task.agree; a task with its own Task.parity decides both), and the message names the worst
image. `worst_image` names the image a format's metric loss most likely comes from. `AtWidth`
feeds the same lines cut or padded to another width (export.width_buckets).

numpy is imported inside the functions: `--help` stays instant.
"""


class AtWidth:
    """A normalised N x C x H x W view of lines at another width: cut at the right, or padded
    with copies of the last column (the paper a line is padded with), batch by batch."""

    def __init__(self, x, width: int):
        self.x, self.width = x, width

    def __len__(self):
        return len(self.x)

    def __getitem__(self, key):
        import numpy as np

        batch = self.x[key]
        have = batch.shape[-1]
        if have >= self.width:
            return np.ascontiguousarray(batch[..., :self.width])
        return np.ascontiguousarray(np.pad(batch, [(0, 0)] * (batch.ndim - 1)
                                           + [(0, self.width - have)], mode="edge"))


def compare(reference, candidate, atol: float, rtol: float, task, params=None) -> dict:
    """Per-image comparison of two N x ... output arrays (numpy arrays of length N).

    abs: max |candidate - reference|; rel: abs / max |reference|; excess: abs beyond the
    tolerance atol + rtol * max |reference| (> 0 fails); agree: the task's decision agrees.
    A task with its own Task.parity decides abs and agree (given the stage's params,
    {section: typed params}); then only agree fails.
    """
    import numpy as np

    n = len(reference)
    custom = task.parity(reference, candidate, params) if params is not None else None
    if custom is not None:
        abs_diff, agree = custom
        return {"abs": abs_diff, "rel": abs_diff, "excess": np.where(agree, -1.0, 0.0),
                "agree": agree}
    diff = np.abs(candidate.astype(np.float64) - reference).reshape(n, -1)
    abs_diff = diff.max(axis=1)
    scale = np.abs(reference.astype(np.float64)).reshape(n, -1).max(axis=1)
    return {"abs": abs_diff, "rel": abs_diff / np.maximum(scale, np.finfo(np.float64).tiny),
            "excess": abs_diff - (atol + rtol * scale),
            "agree": task.agree(reference, candidate)}


def parity_gate(reference, runs: dict, atol: float, rtol: float, paths, what: str, task,
                params=None, against: str = "PyTorch"):
    """(metrics, error message or "") comparing the reference outputs (`against`: PyTorch's)
    with each batch size's run."""
    import numpy as np

    per_batch = {b: compare(reference, out, atol, rtol, task, params)
                 for b, out in sorted(runs.items())}
    abs_diff = np.max([c["abs"] for c in per_batch.values()], axis=0)
    rel_diff = np.max([c["rel"] for c in per_batch.values()], axis=0)
    excess = np.max([c["excess"] for c in per_batch.values()], axis=0)
    agree = np.all([c["agree"] for c in per_batch.values()], axis=0)
    metrics = {"max_abs_diff": float(abs_diff.max()), "max_rel_diff": float(rel_diff.max()),
               task.agreement_name: float(agree.mean()), "batch_sizes": sorted(runs),
               "samples": len(reference)}
    failing = (excess > 0) | ~agree
    if not failing.any():
        return metrics, ""
    # The worst image: a changed decision beats any output difference; then the largest excess.
    worst = int(np.lexsort((-excess, agree))[0])
    batch = max(per_batch, key=lambda b: per_batch[b]["excess"][worst])
    decision = task.describe(reference[worst])
    decisions = (f"; {decision} in {against} vs {task.describe(runs[batch][worst])} in {what}"
                 if decision else "")
    return metrics, (
        f"export: {what} disagrees with {against} on {int(failing.sum())} of {len(failing)} test "
        f"images. Worst image: {paths[worst]} (batch size {batch}: max |output diff| "
        f"{abs_diff[worst]:.3g}, allowed {abs_diff[worst] - excess[worst]:.3g} = export.atol "
        f"{atol:g} + export.rtol {rtol:g} * max|output|{decisions}). "
        f"A preprocessing or normalisation mismatch between the exported graph and the model "
        f"is the usual cause.")


def worst_image(reference, candidate, paths, task, what: str) -> str:
    """The image a metric loss most likely comes from: a changed decision first (the task's
    agree()), then the largest output difference; with both decisions when the task has them."""
    import numpy as np

    n = len(reference)
    diff = np.abs(candidate.astype(np.float64) - reference).reshape(n, -1).max(axis=1)
    agree = task.agree(reference, candidate)
    worst = int(np.lexsort((-diff, agree))[0])
    decision = task.describe(reference[worst])
    decisions = (f"; {decision} in PyTorch vs {task.describe(candidate[worst])} in {what}"
                 if decision else "")
    return (f"{paths[worst]} (max |output diff| {diff[worst]:.3g}{decisions}; "
            f"{int((~agree).sum())} of {n} test images changed decision)")
