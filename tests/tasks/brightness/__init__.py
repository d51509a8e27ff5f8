"""A tiny task that lives in the tests: regress each image's mean brightness, scored by MAE.

tests/test_task_seam.py copies this package to stages/tasks/brightness/ in a temp project and
runs `dvc repro` with `task: brightness`, proving a task plugs in without touching a stage. The
target needs no annotation: it is computed from the pixels the model sees. Its part of the run
report is not here but in tests/tasks/brightness_report.py, which the test copies to
stages/report/tasks/brightness.py.
"""
from stages.tasks.base import Task


class Brightness(Task):
    name = "brightness"
    target_dtype = "float32"
    val_metric = "mae"
    val_higher_is_better = False
    output_names = ("brightness",)
    headline_metric = "mae"
    task_keys = ("sample.per_class",)  # its sample is classification's digits

    def sample(self, p):  # the digits, as classification writes them
        from stages.tasks.classification.sample import digit_images

        return digit_images(p.per_class)

    def encoder(self, meta):
        return lambda row, pixels: float(pixels.mean()) / 255.0

    def build_model(self, name, meta):
        from stages.tasks.classification.model import build_model

        return build_model(name, 1, meta["channels"])  # one output: the brightness

    def loss(self, outputs, targets, p):
        import torch.nn.functional as F

        return F.mse_loss(outputs[:, 0], targets)

    def val_sums(self, outputs, targets):
        error = outputs.float()[:, 0] - targets
        return float((error ** 2).sum()), float(error.abs().sum())

    def evaluate(self, outputs, targets, paths, images, meta, p):
        import numpy as np

        from stages.lib.io import csv_bytes

        predicted = outputs[:, 0].astype(np.float64)
        error = predicted - targets
        metrics = {"mae": float(np.abs(error).mean()),
                   "rmse": float(np.sqrt((error ** 2).mean())), "samples": len(targets)}
        rows = [{"path": s, "target": f"{t:.6f}", "predicted": f"{q:.6f}"}
                for s, t, q in zip(paths, targets, predicted, strict=True)]
        files = {"predictions.csv": csv_bytes(rows, ["path", "target", "predicted"])}
        return metrics, files, f"test MAE {metrics['mae']:.4f} on {len(targets)} images"

    prediction_fields = {"brightness": "number"}

    def decode(self, outputs, meta, k):
        return [{"brightness": round(float(v), 6)} for v in outputs[:, 0]]



TASK = Brightness()
