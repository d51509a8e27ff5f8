"""The steps of a prediction that every path shares, one file and one batch at a time: the
local predict (tools/predict/__main__.py) and the Ray workers of `--ray` (tools/predict/ray.py)
run these same functions, so their rows are the same bytes."""
from stages.lib.io import StageError
from tools.predict.inputs import Problem


def decode_input(path, model, max_pixels: int, source=None) -> tuple:
    """(path, model input or None, error) of one input: a Problem is never opened; a file that
    cannot be read or decoded gets its error. source: where to read it (default: path)."""
    from stages.lib.modality.errors import BadInput
    from tools.inference import input_limit

    if isinstance(path, Problem):
        return (path, None, path.error)
    try:
        return (path, model.modality.read(source or path, model.spec,
                                          input_limit(model, max_pixels)), "")
    except BadInput as exc:
        return (path, None, f"{exc.kind}: {exc}")


def infer(model, batch, top_k: int) -> list[dict]:
    """predict_rows of one batch; a failure of the model itself is a StageError."""
    try:
        return predict_rows(model, batch, top_k, model.version)
    except Exception as exc:  # the images decoded fine: the model (or its file) is bad
        raise StageError(f"{model.path}: inference failed on the batch starting at "
                         f"{batch[0][0]}: {type(exc).__name__}: {exc}. Rows written "
                         f"so far are kept; re-run to continue.") from exc


def predict_rows(model, batch, top_k: int, version: str = "") -> list[dict]:
    """batch: [(path, uint8 image or None, error)] -> output rows in the same order, each
    with the model version."""
    from tools.inference import predict_batch

    preds = iter(predict_batch(model, [img for _, img, _ in batch if img is not None], top_k))
    rows = []
    for path, img, error in batch:
        if img is None:
            rows.append({"path": path, **model.task.empty_prediction(), "error": error,
                         "model": version})
        else:
            rows.append({"path": path, **next(preds), "error": "", "model": version})
    return rows

