"""The routes of `tools.serve`: a FastAPI app over the exported model.

POST /predict takes one or more uploaded images (multipart field `files`) and answers one
prediction per file, in upload order: a file that cannot be used gets its error instead (the
answer is 200 with status `partial`); only when no file is usable does the request fail: 415
when none is an image, 422 when they are corrupt or over --max-pixels (checked from the
header, before decoding). 413 for a body over --max-bytes (by Content-Length or counted while
streaming), and when every file is a clip over the audio modality's duration limit (its
MAX_SECONDS or --max-pixels frames, read from the header; the answer names the limit); a
malformed request is 422 (or 400), never a 5xx. No endpoint takes a path:
nothing on the server's disk can be read through the API.

Memory is bounded by bytes, not only pixels: each image's decode cost (its header's width x
height x bytes per pixel, plus to_model_mode's copies) must fit --max-decode-mb, and decodes
wait on a shared budget of that size (batching.py), so concurrent requests never decode more
at once. Time is bounded too: the decodes waiting for the budget may not cost more than
--max-queued-decode-mb together (past it, 503 with Retry-After at once), and a POST /predict
is answered within --predict-timeout of its body's end (else 503 with Retry-After). /health
and /ready are answered before anything else, and at most --limit-concurrency POST /predict
requests are in flight (guard.py); /docs works offline (docs.py).

The models are app.state.served, a name -> a Served slot (models.py: the loaded model, its
micro-batcher, the requests in flight on it). One model is served under DEFAULT (a file) or
its artifact's name (a registered model), and POST /predict and GET /model serve it; several
registered ones each at POST /predict/{name} and GET /model/{name}, listed by GET /models.
POST /admin/reload (loopback only) and SIGHUP swap in the versions their references now name.
"""
from stages.lib.params import MAX_PIXELS
from tools.inference import input_limit
from tools.serve.batching import Busy, DecodeBudget, ModelFailed
from tools.serve.docs import add_offline_docs
from tools.serve.guard import FastPath, nice_thread
from tools.serve.models import (ReloadFailed, Served, loopback, name_of, ready_body, reload,
                                 start)

MAX_BYTES = 20 * 1024 * 1024
MAX_DECODE_MB = 256
QUEUED_DECODES = 8  # --max-queued-decode-mb's default: this many times --max-decode-mb
PREDICT_TIMEOUT = 30.0
LIMIT_CONCURRENCY = 64
DEFAULT = "default"  # the name a model given as a file is served under


def create_app(model, max_bytes: int = MAX_BYTES, max_pixels: int = MAX_PIXELS,
               metrics_path=None, top_k: int = 3, max_batch: int = 32,
               max_wait_ms: float = 5.0, max_decode_mb: float = MAX_DECODE_MB,
               limit_concurrency: int = LIMIT_CONCURRENCY,
               max_queued_decode_mb: float | None = None,
               predict_timeout: float = PREDICT_TIMEOUT, loaders: dict | None = None):
    """The FastAPI app serving a loaded tools.inference.Model, or several ({name: Model}),
    each a Served slot of app.state.served. loaders: {name: models.Loader}, how
    /admin/reload re-resolves each (none: nothing to reload)."""
    from fastapi import FastAPI

    models = model if isinstance(model, dict) else {name_of(model, DEFAULT): model}
    model = next(iter(models.values()))  # the first: the title, /predict's schema
    state = {"ready": False}
    budget_bytes = int(max_decode_mb * 2**20)
    if max_queued_decode_mb is None:
        max_queued_decode_mb = QUEUED_DECODES * max_decode_mb
    queue_bytes = int(max_queued_decode_mb * 2**20)
    responses = response_models(model)
    app = FastAPI(title="image-pipeline model API", version=model.version,
                  lifespan=lifespan(state, top_k, max_batch, max_wait_ms, budget_bytes,
                                    queue_bytes),
                  max_body_size=max_bytes, docs_url=None, redoc_url=None,
                  description="Predictions of the exported model. Upload images to /predict.")
    add_served(app, models, loaders or {}, metrics_path, top_k, max_batch, max_wait_ms)
    state["ready_body"] = app.state.ready_body
    add_offline_docs(app)
    add_guards(app, max_bytes)
    # Outermost: /health and /ready answered first, POST /predict counted (guard.py)
    app.add_middleware(FastPath, state=state, version=model.version, limit=limit_concurrency)
    serving = {"max_bytes": max_bytes, "max_pixels": max_pixels, "max_decode_mb": max_decode_mb,
               "max_queued_decode_mb": max_queued_decode_mb, "predict_timeout": predict_timeout,
               "max_batch": max_batch, "top_k": top_k, "limit_concurrency": limit_concurrency}
    add_status_routes(app, state, serving, responses[1])
    add_predict(app, responses, max_pixels, budget_bytes, predict_timeout)
    add_admin(app)
    return app


def add_served(app, models: dict, loaders: dict, metrics_path, top_k: int, max_batch: int,
               max_wait_ms: float) -> None:
    """app.state.served (a Served slot per model, started by lifespan), what reload needs."""
    import asyncio

    from tools.inference import describe

    app.state.served = {name: Served(name, m, describe(m, metrics_path), loaders.get(name))
                        for name, m in models.items()}
    app.state.metrics_path = metrics_path
    app.state.batching = (top_k, max_batch, max_wait_ms / 1000)
    app.state.reload_lock = asyncio.Lock()
    app.state.ready_body = ready_body(app.state.served)


def response_models(model) -> tuple:
    """(PredictResponse, Error): the pydantic models of the answers, for the OpenAPI schema."""
    from pydantic import BaseModel, create_model

    # One image's answer: its filename and the task's prediction fields (classification:
    # label, score, topk), typed for the OpenAPI schema.
    types = {"string": str, "number": float, "integer": int, "boolean": bool, "array": list,
             "object": dict}
    # A file that cannot be used gets its error and the task's empty prediction (nulls).
    Prediction = create_model("Prediction", filename=(str, ...), **{
        name: (types[kind] | None, ...) for name, kind in model.task.prediction_fields.items()},
        error=(str, ...))

    class PredictResponse(BaseModel):
        model_version: str
        model: str  # the name it is served under
        registry: dict | None = None  # a registered model: artifact, version, stage, commit...
        status: str  # ok: every file predicted | partial: some have an error instead
        failed: int
        predictions: list[Prediction]

    class AnyPredictResponse(PredictResponse):  # POST /predict/{name}: any model's task
        predictions: list[dict]

    class Error(BaseModel):
        detail: str

    return PredictResponse, Error, AnyPredictResponse


def lifespan(state: dict, top_k: int, max_batch: int, max_wait_ms: float, budget_bytes: int,
             queue_bytes: int):
    """The app's start (each model's micro-batcher and its worker, a first inference so /ready
    means the model really runs, the decode budget and threads) and stop."""
    import contextlib
    import os
    from concurrent.futures import ThreadPoolExecutor

    @contextlib.asynccontextmanager
    async def run(app):
        for served in app.state.served.values():
            await start(served, top_k, max_batch, max_wait_ms / 1000)
        sighup(app)
        app.state.budget = DecodeBudget(budget_bytes, queue_bytes)
        app.state.decoders = ThreadPoolExecutor(os.cpu_count() or 1, "decode",
                                                initializer=nice_thread)
        # Headers are read in their own threads: a request is admitted or refused at once,
        # never behind the decodes of others
        app.state.headers = ThreadPoolExecutor(2, "header", initializer=nice_thread)
        state["ready"] = True
        yield
        state["ready"] = False
        for served in app.state.served.values():
            served.worker.cancel()
        app.state.decoders.shutdown(wait=False, cancel_futures=True)
        app.state.headers.shutdown(wait=False, cancel_futures=True)

    return run


def sighup(app) -> None:
    """SIGHUP reloads, like POST /admin/reload (its outcome logged)."""
    import asyncio
    import logging
    import signal

    log = logging.getLogger("uvicorn.error")

    async def logged():
        try:
            log.warning("SIGHUP: %s", await reload(app))
        except ReloadFailed as exc:
            log.error("SIGHUP: reload failed, nothing changed: %s", exc)

    try:
        asyncio.get_running_loop().add_signal_handler(
            signal.SIGHUP, lambda: asyncio.ensure_future(logged()))
    except (NotImplementedError, RuntimeError, AttributeError):  # not the main thread
        pass


def add_admin(app) -> None:
    """POST /admin/reload: loopback clients only (403 otherwise)."""
    from fastapi import HTTPException, Request

    @app.post("/admin/reload/", include_in_schema=False)  # answered, not redirected
    @app.post("/admin/reload", summary="Swap in the versions the registered models' "
                                       "references name now (loopback clients only)")
    async def admin_reload(request: Request) -> dict:
        # The socket's own peer: uvicorn runs without proxy headers (__main__.py), so an
        # X-Forwarded-For header never makes a remote client loopback
        peer = request.scope.get("client")
        if not peer or not loopback(peer[0]):
            raise HTTPException(403, detail="POST /admin/reload is for loopback clients "
                                            "only: run it on the server's machine")
        try:
            return await reload(app)
        except ReloadFailed as exc:
            raise HTTPException(409, detail=f"reload failed, nothing changed: {exc}") from None


def add_guards(app, max_bytes: int) -> None:
    """Answers before or outside the routes: 413 for a body over max_bytes, 400 when the
    client left mid-body, and 400 (logged loudly) for anything unforeseen."""
    import logging

    from fastapi import Request
    from fastapi.responses import JSONResponse
    from starlette.requests import ClientDisconnect

    log = logging.getLogger("uvicorn.error")

    @app.middleware("http")
    async def refuse_large_bodies(request: Request, call_next):
        # Checked before a byte of the body is read; FastAPI's max_body_size (create_app) also
        # counts the bytes of a streamed body that has no Content-Length.
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > max_bytes:
            return JSONResponse({"detail": f"request body of {length} bytes is over the limit "
                                           f"of {max_bytes} bytes"}, status_code=413)
        return await call_next(request)

    @app.exception_handler(ClientDisconnect)
    async def gone(request: Request, exc: ClientDisconnect):
        # The client left (or was cut off by a timeout) mid-body: nobody reads this answer.
        return JSONResponse({"detail": "client disconnected"}, status_code=400)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        # Anything not handled by the routes came out of parsing a request we did not
        # foresee: answer 400 rather than 500, and log it loudly (the fuzz test fails on this
        # log line).
        log.error("unhandled %s on %s %s", type(exc).__name__, request.method, request.url.path,
                  exc_info=exc)
        return JSONResponse({"detail": f"cannot process this request ({type(exc).__name__})"},
                            status_code=400)


def add_status_routes(app, state: dict, serving: dict, Error) -> None:
    """GET /health (the process answers), /ready (the models have run once), /models (each
    served model: name, version, registry facts), /model and /model/{name} (a model's card,
    the serving limits and how many batches and images it has served)."""
    from fastapi.responses import JSONResponse

    @app.get("/health", summary="Liveness: the process answers")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/ready", summary="Readiness: the model is loaded and has run once",
             responses={503: {"model": Error}})
    async def ready():
        if not state["ready"]:
            return JSONResponse({"detail": "model not loaded yet"}, status_code=503)
        return {"ready": True, **app.state.ready_body}

    @app.get("/models", summary="The models served: name, version, registry facts")
    async def models() -> dict:
        return {"models": [{"name": name, "version": s.model.version, "task": s.model.task.name,
                            "registry": s.answer_fields()["registry"],
                            "predict": f"/predict/{name}"}
                           for name, s in sorted(app.state.served.items())]}

    def card(served) -> dict:
        batcher = served.batcher
        stats = {"batches": batcher.batches, "images": batcher.images} if batcher else {}
        stats["predicts_in_flight"] = state.get("in_flight", 0)
        return {**served.card, "name": served.name, "serving": {**serving, **stats}}

    @app.get("/model", summary="Class names, input size, provenance and eval metrics",
             responses={400: {"model": Error}})
    async def model_card() -> dict:
        return card(pick(app, None, "/model"))

    @app.get("/model/{name:path}", summary="One served model's card (GET /models lists them)",
             responses={404: {"model": Error}})
    async def named_card(name: str) -> dict:
        return card(pick(app, name, "/model"))


def pick(app, name: str | None, route: str):
    """The Served slot a request takes: name's (404 when none), or with no name the only one
    (400 when several are served, naming them)."""
    from fastapi import HTTPException

    served = app.state.served
    if name is None:
        if len(served) == 1:
            return next(iter(served.values()))
        raise HTTPException(400, detail=f"{len(served)} models are served: use {route}/NAME "
                                        f"with NAME one of {', '.join(sorted(served))} "
                                        f"(GET /models)")
    if name not in served:
        from tools.registry.safety import clip

        raise HTTPException(404, detail=f"no model named '{clip(name, 80)}' is served; the models: "
                                        f"{', '.join(sorted(served))} (GET /models)")
    return served[name]


def add_predict(app, responses: tuple, max_pixels: int, budget_bytes: int,
                predict_timeout: float) -> None:
    """POST /predict: every uploaded file decoded (decode_upload), the usable ones predicted
    in the micro-batcher's batches, one answer per file in upload order (a file that cannot
    be used gets its error: 200, status `partial`; no usable file at all: 415 or 422). Within
    predict_timeout of its body's end, or 503 with Retry-After: so is a request the decode
    queue cannot take."""
    import asyncio
    import logging
    from typing import Annotated

    from fastapi import File, HTTPException, UploadFile

    from stages.lib.modality.errors import BadInput

    from stages.lib import hooks

    log = logging.getLogger("uvicorn.error")
    delay = float(hooks.value("SERVE_DELAY_S") or 0)
    PredictResponse, Error, AnyPredictResponse = responses
    errors = {413: {"model": Error, "description": "body over the byte limit, or every clip "
                                                   "over the audio duration limit"},
              415: {"model": Error, "description": "no file is an image"},
              422: {"model": Error, "description": "no file is usable (corrupt, over the "
                                                   "pixel limit), or a bad request"},
              503: {"model": Error, "description": "busy (the decode queue is full, or no "
                                                   "answer within --predict-timeout: retry "
                                                   "after Retry-After seconds), or the model "
                                                   "failed"}}
    Files = Annotated[list[UploadFile], File(
        description="One or more image files (multipart/form-data, field `files`)")]

    @app.post("/predict", response_model=PredictResponse, summary="Predict one or more "
              "uploaded images (the model, when one is served)",
              responses={**errors, 400: {"model": Error, "description": "several models are "
                                                                        "served: name one"}})
    async def predict(files: Files):
        return await handle(files, pick(app, None, "/predict"))

    @app.post("/predict/{name:path}", response_model=AnyPredictResponse,
              summary="Predict one or more uploaded images with the model served as name "
                      "(GET /models)",
              responses={**errors, 404: {"model": Error, "description": "no such model"}})
    async def predict_named(name: str, files: Files):
        return await handle(files, pick(app, name, "/predict"))

    async def handle(files, served) -> dict:
        """One request on the slot it took (and keeps to its end, whatever a reload does)."""
        budget = app.state.budget
        served.in_flight += 1
        try:
            async with asyncio.timeout(predict_timeout):
                if delay:  # a test hook: hold the model across a reload
                    await asyncio.sleep(delay)
                return await answer(files, served)
        except Busy as exc:
            raise HTTPException(503, detail=exc.detail,
                                headers={"Retry-After": str(exc.retry_after)}) from None
        except TimeoutError:
            wait = budget.retry_after()
            raise HTTPException(503, headers={"Retry-After": str(wait)}, detail=(
                f"no answer within --predict-timeout {predict_timeout:g} s: the server is "
                f"busy; retry in {wait} s")) from None
        finally:
            served.in_flight -= 1

    async def answer(files, served) -> dict:
        model = served.model
        images, errors = [], []  # per file: a decoded image or None, and its error
        for index, upload in enumerate(files):
            name = upload.filename or f"file #{index + 1}"
            try:
                images.append(await decode_upload(app, upload, model, max_pixels,
                                                  budget_bytes))
                errors.append(None)
            except BadInput as exc:
                images.append(None)
                errors.append((exc.kind, name, str(exc)))
        if all(errors):  # nothing to predict: the request fails, naming every file
            kinds = {kind for kind, _, _ in errors}
            # too_long: a clip over the modality's duration limit (the message names it)
            status = 415 if kinds == {"not_image"} else 413 if kinds == {"too_long"} else 422
            raise HTTPException(status, detail="; ".join(f"{name}: {why}"
                                                         for _, name, why in errors))
        try:
            results = iter(await served.batcher.predict([i for i in images if i is not None]))
        except ModelFailed as exc:
            log.error("model failed: %s", exc)
            raise HTTPException(503, detail=f"the model failed: {exc}") from None
        failed = sum(1 for e in errors if e)
        return {"model_version": model.version, **served.answer_fields(),
                "status": "partial" if failed else "ok", "failed": failed, "predictions": [
                    {"filename": upload.filename or "", **(
                        model.task.empty_prediction() if error else next(results)),
                     "error": f"{error[0]}: {error[2]}" if error else ""}
                    for upload, error in zip(files, errors, strict=True)]}


async def decode_upload(app, upload, model, max_pixels: int, budget_bytes: int):
    """One upload as the model's input, decoded off the event loop: its header first (in the
    header threads: the decode's cost, refused past max_pixels or the budget), then, once that
    cost is admitted to the shared budget (batching.DecodeBudget; Busy when its queue is
    full), the decode itself in the decode threads. The budget is given back when the decode's
    thread ends, even when the request stopped waiting for it (its deadline passed): memory
    stays bounded. Raises BadInput for a file that cannot be used."""
    import asyncio
    from functools import partial

    source = upload.file  # spooled to disk past 1 MiB: never read whole into memory
    loop = asyncio.get_running_loop()
    cost, draft = await loop.run_in_executor(app.state.headers, partial(
        model.modality.read_header, source, model.spec, input_limit(model, max_pixels),
        budget_bytes))
    budget = app.state.budget
    await budget.acquire(cost)
    decode = loop.run_in_executor(app.state.decoders, partial(  # draft: a reduced decode
        model.modality.read_drafted, source, model.image_size, model.channels, draft,
        model.letterbox) if draft else partial(model.modality.read, source, model.spec,
                                               input_limit(model, max_pixels)))

    def done(future):
        budget.release(cost, decoded=not future.cancelled())
        if not future.cancelled():
            future.exception()  # retrieved: a request that gave up leaves no warning

    decode.add_done_callback(done)
    return await asyncio.shield(decode)
