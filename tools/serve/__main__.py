"""`python -m tools.serve`: a local HTTP API for the exported model, FastAPI on uvicorn,
127.0.0.1 by default. Not a DVC stage.

The routes and the --predict-timeout deadline are app.py's; the micro-batching and the decode
budget and queue batching.py's; the timed connections, the 400 for bytes that are no request
and the --host check transport.py's; the status fast path, the predict limit and
the niced threads guard.py's; the offline /docs docs.py's.
"""
from pathlib import Path

import click

from stages.lib.modality.errors import KINDS, MIXED_STATUS
from tools.options import model_options
from tools.serve.config import (BODY_TIMEOUT, HEADER_TIMEOUT, KEEP_ALIVE_TIMEOUT,
                                LIMIT_CONCURRENCY, MAX_BYTES, MAX_DECODE_MB, PREDICT_TIMEOUT,
                                QUEUED_DECODES, ServeConfig)
from tools.serve.transport import check_host, timed_protocol


def statuses() -> str:
    """The bad-input statuses, from errors.KINDS: `STATUS kind, kind; STATUS kind; ...`."""
    kinds_of = {}
    for kind, (status, _) in KINDS.items():
        kinds_of.setdefault(status, []).append(kind)
    return "; ".join(f"{status} {', '.join(kinds)}" for status, kinds in kinds_of.items())


HELP = f"""Serve the model (or several) over HTTP until Ctrl-C.

    Endpoints: POST /predict (multipart field `files`, one or more files of the model's
    modality: images, sound files) returns per file the task's prediction (classification:
    label, score, top-k) and the model version; GET /health (liveness), GET /ready (model
    loaded: 200, else 503), GET /model (task, classes, input size, provenance, eval metrics),
    GET /docs (OpenAPI UI), /openapi.json.

    --model NAME#prod (NAME@v1.2.0, NAME) serves a registered model of --registry (default:
    this repository), fetched once into the model cache and hash-checked before every load;
    its answers and /model name its artifact, version, stage, commit and data version.
    Several --model NAME#stage serve several: GET /models lists them, POST /predict/NAME
    and GET /model/NAME serve each. POST /admin/reload (from this machine only) or SIGHUP
    swaps in the versions the references name now (after `gto assign`): requests in flight
    finish on the old model (docs/predict-serve.md).

    Each file is answered on its own: one that is not of the model's modality, is corrupt or
    declares more than a limit in its header (--max-pixels for images, --max-seconds for
    sounds; not decoded) gets its error in
    its place, and the answer is 200 with status `partial`; only when no file is usable does
    the request fail, naming every file, with the status of its files' kind of bad input
    ({statuses()}; {MIXED_STATUS} for kinds of different statuses).

    Every request is answered within a bound: its headers within --header-timeout and its
    body within --body-timeout (else 408); bytes that cannot begin an HTTP request get 400 at
    once; from the end of its body, a POST /predict is answered within --predict-timeout (a
    result, or 503 with Retry-After), and at once with 503 with Retry-After when the decode
    queue (--max-queued-decode-mb) or --limit-concurrency is full.
    """


def return_freed_memory() -> None:
    """glibc: serve allocations over 1 MiB with mmap, so a decode's buffers go back to the
    system when freed instead of staying in the heap (RSS falls back after a burst)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


@click.command(help=HELP)
@model_options(several=True)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on; 127.0.0.1 answers this machine only. Any address "
                   "that is not loopback (\"\", 0, 0.0.0.0, ::, a LAN address) needs --expose.")
@click.option("--expose", is_flag=True,
              help="Allow a --host that is not loopback (a warning names the interfaces).")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True,
              help="TCP port.")
@click.option("--max-bytes", type=click.IntRange(min=1), default=MAX_BYTES, show_default=True,
              help=f"Largest request body accepted; larger ones get "
                   f"{KINDS['body_too_large'][0]} (body_too_large).")
@click.option("--metrics", "metrics_path", type=click.Path(dir_okay=False),
              default="metrics/eval.json", show_default=True,
              help="Evaluation metrics shown by GET /model, when the file exists.")
@click.option("--max-batch", type=click.IntRange(min=1), default=32, show_default=True,
              help="Most images in one inference call (concurrent requests are batched).")
@click.option("--max-wait-ms", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="How long the first queued image waits for others to join its batch.")
@click.option("--max-decode-mb", type=click.FloatRange(min=1), default=MAX_DECODE_MB,
              show_default=True,
              help="Decode memory budget: an image needing more (width x height x bytes per "
                   "pixel, with conversion copies) is refused as too_large (a big JPEG is "
                   "decoded at a reduced scale instead); concurrent decodes together stay "
                   "within it.")
@click.option("--max-queued-decode-mb", type=click.FloatRange(min=1), default=None,
              help=f"Decode work that may wait for the budget (the decode costs of the "
                   f"images queued); an image that would overflow it gets 503 with "
                   f"Retry-After at once. Default: {QUEUED_DECODES} x --max-decode-mb.")
@click.option("--predict-timeout", type=click.FloatRange(min=0.1), default=PREDICT_TIMEOUT,
              show_default=True,
              help="Seconds from the end of a POST /predict's body to its answer (decode "
                   "queue, decode, inference); past it, 503 with Retry-After.")
@click.option("--header-timeout", type=click.FloatRange(min=0.1), default=HEADER_TIMEOUT,
              show_default=True, help="Seconds a request's headers may take (then 408).")
@click.option("--body-timeout", type=click.FloatRange(min=0.1), default=BODY_TIMEOUT,
              show_default=True,
              help="Seconds a request's body may take after its headers (then 408).")
@click.option("--keep-alive-timeout", type=click.IntRange(min=1), default=KEEP_ALIVE_TIMEOUT,
              show_default=True, help="Seconds an idle keep-alive connection stays open.")
@click.option("--limit-concurrency", type=click.IntRange(min=1), default=LIMIT_CONCURRENCY,
              show_default=True,
              help="Most POST /predict requests in flight at once (upload to answer); the "
                   "next gets 503. /health and /ready are never counted or refused; idle "
                   "connections are not counted (the timeouts close them).")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info"]),
              default="info", show_default=True, help="uvicorn's log level.")
def main(model_path, registry, backend, threads, score_threshold, beam, min_confidence, expose,
         max_seconds, **options):
    warning = check_host(options["host"], expose)  # before anything is loaded
    config = ServeConfig.from_options(options, project=Path.cwd().name)
    return_freed_memory()
    models, loaders = load_models(model_path, registry, backend, threads, score_threshold, beam,
                                  max_seconds, min_confidence)
    from tools.serve.app import create_app

    app = create_app(models, config, loaders)
    if warning:
        click.echo(warning, err=True)
    for name, model in models.items():
        which = (f"{model.registry['artifact']} {model.registry['version']} (commit "
                 f"{model.registry['commit'][:8]})" if model.registry else model.path)
        click.echo(f"serve: {which} ({model.backend}, version {model.version}) on "
                   f"http://{config.host}:{config.port}"
                   f"{'' if len(models) == 1 else f'/predict/{name}'} (docs at /docs)", err=True)
    run(app, config)


def load_models(model_path, registry, backend, threads, score_threshold, beam,
                max_seconds=0.0, min_confidence=None) -> tuple:
    """({name: loaded model}, {name: its Loader}) of the --model options (none: the default
    model file), each loaded in the niced inference thread (the backend's threads inherit its
    priority); a UsageError when two take one name, or several are given and one is a file."""
    from tools.serve.app import DEFAULT
    from tools.serve.guard import inference_executor
    from tools.serve.models import Loader, name_of

    models, loaders = {}, {}
    for text in model_path or (None,):
        loader = Loader(text, registry, backend, threads, score_threshold, beam,
                        max_seconds=max_seconds, min_confidence=min_confidence)
        path, facts = loader.fetch()  # a registered model: resolved, fetched, checked
        model = inference_executor().submit(loader.load, path, facts).result()
        name = name_of(model, DEFAULT)
        if name in models or (len(model_path) > 1 and not facts):
            raise click.UsageError(f"--model {text}: several models are served by their "
                                   f"registered names, one each (--model detector#prod "
                                   f"--model ocr#prod); {name} is "
                                   + ("given twice" if name in models else "a file"))
        models[name], loaders[name] = model, loader
    return models, loaders


def run(app, config: ServeConfig) -> None:
    """uvicorn serving app until Ctrl-C, with the config's address and deadlines."""
    import uvicorn

    host = config.host
    uvicorn.run(app, host="0.0.0.0" if host == "0" else host, port=config.port,
                log_level=config.log_level,
                http=timed_protocol(config.header_timeout, config.body_timeout),
                # the client is the socket's peer: an X-Forwarded-For header is never trusted,
                # whatever FORWARDED_ALLOW_IPS says (POST /admin/reload is for loopback only)
                proxy_headers=False,
                # the limit is FastPath's, not uvicorn's
                timeout_keep_alive=config.keep_alive_timeout)


if __name__ == "__main__":
    main()
