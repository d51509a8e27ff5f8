"""The routes of `tools.serve`: a FastAPI app over the exported model, set up from one
ServeConfig (config.py).

POST /predict takes one or more uploaded files of the model's modality (multipart field
`files`: images, sound files) and answers one prediction per file, in upload order
(predict.py): a file that cannot be used gets its error instead (the answer is 200 with status
`partial`); only when no file is usable does the request fail, with the status of its files'
kind of bad input (stages/lib/modality/errors.py KINDS, where every such status is written,
--max-bytes' too; a file is checked from its header before it is decoded). A malformed request
is refused with a 4xx, never a 5xx. No endpoint takes a path: nothing on the server's disk can
be read through the API.

Memory is bounded by bytes, not only pixels: each input's decode cost (read from its header)
must fit --max-decode-mb, and decodes wait on a shared budget of that size (batching.py), so
concurrent requests never decode more at once. Time is bounded too: the decodes waiting for
the budget may not cost more than --max-queued-decode-mb together (past it, 503 with
Retry-After at once), and a POST /predict is answered within --predict-timeout of its body's
end (else 503 with Retry-After). /health and /ready are answered before anything else, and at
most --limit-concurrency POST /predict requests are in flight (guard.py); /docs works offline
(docs.py).

The models are app.state.served, a name -> a Served slot (models.py: the loaded model, its
micro-batcher, the requests in flight on it). One model is served under DEFAULT (a file) or
its artifact's name (a registered model), and POST /predict and GET /model serve it; several
registered ones each at POST /predict/{name} and GET /model/{name}, listed by GET /models.
POST /admin/reload (loopback only) and SIGHUP swap in the versions their references now name.
"""
from stages.lib.modality.errors import STATUS, WORDS
from tools.serve.batching import DecodeBudget
from tools.serve.config import ServeConfig
from tools.serve.docs import add_offline_docs
from tools.serve.guard import FastPath, nice_thread
from tools.serve.models import ReloadFailed, Served, loopback, name_of, ready_body, reload, start
from tools.serve.predict import Predict, bad_input_responses

DEFAULT = "default"  # the name a model given as a file is served under


def create_app(models, config: ServeConfig | None = None, loaders: dict | None = None):
    """The FastAPI app serving a loaded tools.inference.Model, or several ({name: Model}),
    each a Served slot of app.state.served, as config says (default: the options'
    defaults). loaders: {name: models.Loader}, how /admin/reload re-resolves each (none:
    nothing to reload)."""
    from fastapi import FastAPI

    config = config or ServeConfig()
    models = models if isinstance(models, dict) else {name_of(models, DEFAULT): models}
    first = next(iter(models.values()))  # its version: the API's; its task: /predict's schema
    state = {"ready": False}
    responses = response_models(first)
    title, description = api_words(models, config.project)
    app = FastAPI(title=title, version=first.version, description=description,
                  lifespan=lifespan(state, config), max_body_size=config.max_bytes,
                  docs_url=None, redoc_url=None)
    app.state.config = config
    add_served(app, models, loaders or {}, config)
    state["ready_body"] = app.state.ready_body
    add_offline_docs(app)
    add_guards(app, config.max_bytes)
    # Outermost: /health and /ready answered first, POST /predict counted (guard.py)
    app.add_middleware(FastPath, state=state, version=first.version,
                       limit=config.limit_concurrency)
    add_status_routes(app, state, config.shown(), responses[1])
    add_predict(app, responses, modalities(models))
    add_admin(app)
    return app


def modalities(models: dict) -> list[str]:
    """The served models' modality names, each once, in the order served."""
    return list(dict.fromkeys(m.task.modality_name for m in models.values()))


def api_words(models: dict, project: str = "") -> tuple[str, str]:
    """(the API's title, its description): the project, the served models' tasks and, in
    their modality's words, what /predict takes."""
    tasks = " + ".join(dict.fromkeys(m.task.name for m in models.values()))
    files = " or ".join(WORDS[name]["many"] for name in modalities(models))
    title = f"{project + ': ' if project else ''}{tasks} model API"
    what = "the exported model" if len(models) == 1 else f"{len(models)} models"
    return title, f"Predictions of {what} ({tasks}). Upload {files} to /predict."


def add_served(app, models: dict, loaders: dict, config: ServeConfig) -> None:
    """app.state.served (a Served slot per model, started by lifespan), what reload needs."""
    import asyncio

    from tools.inference import describe

    app.state.served = {name: Served(name, m, describe(m, config.metrics_path),
                                     loaders.get(name)) for name, m in models.items()}
    app.state.metrics_path = config.metrics_path
    app.state.batching = (config.top_k, config.max_batch, config.max_wait_ms / 1000)
    app.state.reload_lock = asyncio.Lock()
    app.state.ready_body = ready_body(app.state.served)


def response_models(model) -> tuple:
    """(PredictResponse, Error): the pydantic models of the answers, for the OpenAPI schema."""
    from pydantic import BaseModel, create_model

    # One file's answer: its filename and the task's prediction fields (classification:
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


def lifespan(state: dict, config: ServeConfig):
    """The app's start (each model's micro-batcher and its worker, a first inference so /ready
    means the model really runs, the decode budget and threads) and stop."""
    import contextlib
    import os
    from concurrent.futures import ThreadPoolExecutor

    @contextlib.asynccontextmanager
    async def run(app):
        for served in app.state.served.values():
            await start(served, *app.state.batching)
        sighup(app)
        app.state.budget = DecodeBudget(config.budget_bytes, config.queue_bytes)
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
    """Answers before or outside the routes: body_too_large's status (errors.KINDS) for a
    body over max_bytes, 400 when the
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
                                           f"of {max_bytes} bytes (--max-bytes)"},
                                status_code=STATUS["body_too_large"])
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


def add_predict(app, responses: tuple, served_modalities: list[str]) -> None:
    """POST /predict (the model, when one is served) and POST /predict/{name}: the Predict
    handler (predict.py) on the slot the request names."""
    from typing import Annotated

    from fastapi import File, UploadFile

    handler = Predict(app, app.state.config)
    PredictResponse, Error, AnyPredictResponse = responses
    what = " or ".join(WORDS[name]["many"] for name in served_modalities)
    errors = {**bad_input_responses(Error, served_modalities), 503: {
        "model": Error, "description": "busy (the decode queue is full, or no answer within "
                                       "--predict-timeout: retry after Retry-After seconds), "
                                       "or the model failed"}}
    Files = Annotated[list[UploadFile], File(
        description=f"One or more {what} (multipart/form-data, field `files`)")]

    @app.post("/predict", response_model=PredictResponse, summary=f"Predict one or more "
              f"uploaded {what} (the model, when one is served)", responses={
                  **errors, 400: {"model": Error, "description": "several models are served: "
                                                                 "name one"}})
    async def predict(files: Files):
        return await handler(files, pick(app, None, "/predict"))

    @app.post("/predict/{name:path}", response_model=AnyPredictResponse,
              summary=f"Predict one or more uploaded {what} with the model served as name "
                      f"(GET /models)",
              responses={**errors, 404: {"model": Error, "description": "no such model"}})
    async def predict_named(name: str, files: Files):
        return await handler(files, pick(app, name, "/predict"))
