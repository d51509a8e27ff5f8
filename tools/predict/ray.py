"""`tools.predict --ray [ADDRESS]`: the same predictions, computed on a Ray cluster (issue 31).

The driver (this process) lists the inputs exactly as the local predict does (rowfile's
pending()), cuts them into shards of --ray-shard batches of --batch-size files, and hands each
shard to Ray: a task reads and decodes its files where it runs, then an actor of the pool,
which loaded the model once, predicts it batch by batch, so every batch holds the same files
as locally (a model's outputs may depend on its batch's composition). The rows come back by
shard and the driver writes them in shard order through predict's own writer, each once.

Bounded: at most AHEAD shards per actor are submitted ahead of the first shard not yet
written, so the driver holds a bounded number of finished, out-of-order shards whatever N.

A node that dies takes its actors and tasks with it: each shard in flight there is submitted
again (to the actors left; a new one when none is), up to RETRIES times. Nothing is written
before its shard is complete, so nothing is lost or written twice; after a driver crash, the
same command resumes from --out as the local predict does.
"""
import os
import sys
import time
from pathlib import Path

from stages.lib.io import StageError

AHEAD = 3  # shards per actor submitted ahead of the first shard not yet written
RETRIES = 5  # submissions of one shard after a system failure (a node, an actor, an object)
ROOT = Path(__file__).resolve().parents[2]  # the project: tools/predict/ray.py


def check_reachable(address: str) -> None:
    """Fail in seconds, naming the fix, when ADDRESS is no Ray address or nothing listens
    there (Ray itself retries for a long time before giving up)."""
    from stages.lib.data import raycluster

    if raycluster.host_port(address) is None:
        raise StageError(f"--ray {address}: not a Ray address; give HOST:PORT as `ray start "
                         f"--head` prints it (e.g. 10.0.0.5:6379), or a bare --ray for a "
                         f"local cluster.")
    try:
        raycluster.check_reachable(address)
    except ConnectionError as exc:
        raise StageError(f"--ray {exc}") from None  # names ADDRESS and the fix


def connect(address: str):
    """The ray module, connected (stages.lib.data.raycluster) to a local cluster (address "local")
    or to the cluster at address. Workers import this project's code as Ray lets them: a
    local cluster's inherit this process's environment; Ray adds the driver's working
    directory (the project root, where predict runs) to every worker's import path."""
    from stages.lib import hooks
    from stages.lib.data import raycluster

    if address not in raycluster.LOCAL:
        check_reachable(address)
    env = hooks.forwarded()  # tests only: a runtime_env starts fresh workers (seconds each)
    return raycluster.connect(address, runtime_env={"env_vars": env} if env else None)


def shards(paths, size: int):
    """Consecutive lists of `size` paths (the last one shorter)."""
    shard = []
    for path in paths:
        shard.append(path)
        if len(shard) == size:
            yield shard
            shard = []
    if shard:
        yield shard


def decode_shard(items, model_spec: dict, max_pixels: int):
    """Worker side: [(path, absolute path, problem error)] -> [(path, array, (w, h), error)]."""
    import numpy as np

    from tools.predict.inputs import Problem
    from tools.predict.rows import decode_input

    out = []
    for path, source, problem in items:
        key = Problem(path, problem) if problem is not None else path
        _, img, error = decode_input(key, _Spec(model_spec), max_pixels, source)
        size = getattr(img, "source_size", None)
        out.append((path, None if img is None else img.view(np.ndarray), size, error))
    return out


class _Spec:
    """What decode_input needs of a model, without the model."""

    def __init__(self, spec: dict):
        from stages.lib.modality import get

        self.modality = get(spec["modality"])
        self.spec = self.modality.Spec.from_meta(spec["recipe"])
        self.max_seconds = spec["max_seconds"]


class Predictor:
    """An actor: the model loaded once, its share of threads; predicts one shard per call."""

    def __init__(self, spec: dict):
        from tools.inference import load

        self.model = load(spec["backend"], spec["path"], spec["threads"])
        self.model.meta.update(spec["meta"])

    def predict(self, decoded, batch_size: int, top_k: int) -> list[list[dict]]:
        from tools.predict.rows import infer

        sized = self.model.modality.sized
        batch = [(path, None if img is None else sized(img, size), error)
                 for path, img, size, error in decoded]
        from stages.lib import hooks

        delay = float(hooks.value("PREDICT_RAY_DELAY_S") or 0)
        rows = []
        for i in range(0, len(batch), batch_size):
            rows.append(infer(self.model, batch[i:i + batch_size], top_k))
            time.sleep(delay)
        return rows


def model_file(backend: str, model_path) -> str:
    """The absolute path of the model file predict loaded (its --model, else the backend's
    default): the path every actor loads."""
    from tools.inference import ONNX_MODEL, OPENVINO_MODEL, TORCH_MODEL

    default = {"onnxruntime": ONNX_MODEL, "openvino": OPENVINO_MODEL}.get(backend, TORCH_MODEL)
    return os.path.abspath(model_path or default)


def actor_spec(model, model_path, threads: int) -> dict:
    """What every actor needs to load the model predict loaded (from model_path, its --model)
    and what every decode task needs of it."""
    return {"backend": model.backend, "path": model_file(model.backend, model_path),
            "threads": threads or 1,
            "meta": dict(model.meta), "recipe": model_recipe(model),
            "modality": model.task.modality_name, "max_seconds": model.max_seconds}


def model_recipe(model) -> dict:
    """The model's stored input recipe (stages/lib/modality/spec.py), as the decode tasks
    rebuild its spec from it."""
    from stages.lib.modality.spec import LETTERBOX

    return {**model.recipe, LETTERBOX: model.letterbox}


def check_retry(ray, exc, index: int, items, attempt: int, spec: dict) -> None:
    """Return when the shard whose result raised exc was lost to a system failure (a node, an
    actor or an object) and may be submitted again; raise (a StageError, or our code's own
    error) when it may not."""
    if isinstance(exc, ray.exceptions.RayTaskError):  # our code raised: not a retry case
        cause = exc.cause if isinstance(exc.cause, Exception) else exc
        if isinstance(cause, StageError):
            raise StageError(cause.message) from None
        raise cause from None
    if "creation task" in str(exc):  # the actor could not start
        raise StageError(f"--ray: an actor could not start ({exc}); every node needs this "
                         f"project at {ROOT} (run predict from there, or set PYTHONPATH for "
                         f"`ray start`) and the model at {spec['path']} (docs/ray.md).") from None
    if attempt >= RETRIES:
        raise StageError(f"--ray: shard {index} (from {items[0][0]}) failed {attempt} times "
                         f"({type(exc).__name__}: {exc}); rows written so far are kept: "
                         f"re-run to continue.") from None


def _item(path) -> tuple:
    """(path, absolute path, problem error) of one input, as decode_shard takes it."""
    problem = getattr(path, "error", None)
    return (str(path), None if problem else os.path.abspath(path), problem)


def predict_on_ray(ray, paths, model, model_path, emit, *, batch_size: int,
                   shard_batches: int, top_k: int, max_pixels: int, threads: int,
                   progress: bool) -> None:
    """Predict every path on the cluster `ray` is connected to with the model predict loaded
    from model_path (its --model); emit(rows) each batch's rows in input order, each once."""
    from tqdm import tqdm

    spec = actor_spec(model, model_path, threads)
    decode_spec = {k: spec[k] for k in ("recipe", "modality", "max_seconds")}
    decode = ray.remote(num_cpus=0, max_retries=3)(decode_shard)
    actor_class = ray.remote(num_cpus=spec["threads"], max_restarts=0)(Predictor)
    size = max(1, int(ray.cluster_resources().get("CPU", 1) // spec["threads"]))
    load = {actor_class.remote(spec): 0 for _ in range(size)}  # live actors -> shards queued
    inflight = {}  # ref -> (index, actor, items, attempt)
    finished = {}  # index -> rows by batch, waiting for the shards before it
    source = iter(enumerate(shards(paths, batch_size * shard_batches)))
    written, submitted, files, start = 0, 0, 0, time.perf_counter()

    def submit(index, items, attempt):
        if not load:  # every actor died: a new one, placed wherever CPUs are left
            load[actor_class.remote(spec)] = 0
        actor = min(load, key=load.get)
        load[actor] += 1
        ref = actor.predict.remote(decode.remote(items, decode_spec, max_pixels),
                                   batch_size, top_k)
        inflight[ref] = (index, actor, items, attempt)

    bar = tqdm(unit="shard", desc="predict (ray)", disable=None if progress else True,
               dynamic_ncols=True)
    try:
        while True:
            while len(inflight) < 2 * max(len(load), 1) and submitted - written < AHEAD * size:
                nxt = next(source, None)
                if nxt is None:
                    break
                submit(nxt[0], [_item(p) for p in nxt[1]], 1)
                submitted += 1
            if not inflight:
                break
            (ref,), _ = ray.wait(list(inflight), num_returns=1)
            index, actor, items, attempt = inflight.pop(ref)
            if actor in load:
                load[actor] -= 1
            try:
                finished[index] = ray.get(ref)
            except ray.exceptions.RayError as exc:  # ours re-raised; a lost node: again
                check_retry(ray, exc, index, items, attempt, spec)
                if isinstance(exc, ray.exceptions.RayActorError):
                    load.pop(actor, None)
                bar.write(f"predict: shard {index} lost ({type(exc).__name__}: a node or "
                          f"actor died); resubmitted", file=sys.stderr)
                submit(index, items, attempt + 1)
                continue
            while written in finished:
                for rows in finished.pop(written):
                    emit(rows)
                    files += len(rows)
                written += 1
                bar.update(1)
                bar.set_postfix_str(f"{files / (time.perf_counter() - start):.1f} files/s",
                                    refresh=False)
    finally:
        bar.close()
