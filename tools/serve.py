"""A local HTTP API for the exported model: FastAPI on uvicorn, 127.0.0.1 by default.

Not a DVC stage. POST /predict takes one or more uploaded images (multipart field `files`).
Images of concurrent requests are micro-batched: a single worker collects queued images until
it has --max-batch of them or --max-wait-ms passed since the first, then runs one inference
call in a thread, so many small requests share one onnxruntime call.

Bad input never causes a 5xx: 413 for a body over --max-bytes (by Content-Length or counted
while streaming), 415 for a file that is not an image, 422 for a corrupt image, an image over
--max-pixels (checked from its header, before decoding) or a malformed request. No endpoint
takes a path: nothing on the server's disk can be read through the API.

Memory is bounded by bytes, not only pixels: each image's decode cost (its header's width x
height x bytes per pixel, plus to_model_mode's copies) must fit --max-decode-mb, and decodes
wait on a shared budget of that size, so concurrent requests never decode more at once.
Connections are timed: headers within --header-timeout, the body within --body-timeout (a
client that sends less than its Content-Length is answered 408 and cut off), idle keep-alive
connections closed after --keep-alive-timeout. At most --limit-concurrency POST /predict
requests in flight (503 above); /health and /ready are answered before anything else and never
counted or refused (serve_guard.py).
/docs serves Swagger UI's files from the swagger-ui-bundle package: it works offline; no
/redoc (serve_docs.py).
"""
from pathlib import Path

import click

from stages.lib.params import MAX_PIXELS
from tools.options import apply_decode_options, model_options
from tools.serve_docs import add_offline_docs
from tools.serve_guard import FastPath, inference_executor, nice_thread

MAX_BYTES = 20 * 1024 * 1024
MAX_DECODE_MB = 256
HEADER_TIMEOUT, BODY_TIMEOUT, KEEP_ALIVE_TIMEOUT, LIMIT_CONCURRENCY = 10.0, 30.0, 5, 64
WILDCARDS = ("", "0", "0.0.0.0", "::", "[::]", "*")


class DecodeBudget:
    """An asyncio semaphore counted in bytes: decodes run while their costs together fit."""

    def __init__(self, total: int):
        import asyncio

        self.total, self.used = total, 0
        self.changed = asyncio.Condition()

    async def acquire(self, cost: int) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: self.used + cost <= self.total or not self.used)
            self.used += cost

    async def release(self, cost: int) -> None:
        async with self.changed:
            self.used -= cost
            self.changed.notify_all()


def timed_protocol(header_timeout: float, body_timeout: float):
    """uvicorn's h11 protocol with a deadline for a request's headers (from the connection's
    start or a new request's first byte) and one for its body (from the end of the headers):
    past either, the client gets 408 and the connection is closed."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        def connection_made(self, transport):
            super().connection_made(transport)
            self._header_timer = self._body_timer = self._timed_cycle = None
            self._start_header_timer()

        def _start_header_timer(self):
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout, self._timed_out,
                                                          "headers", header_timeout)

        def _cancel(self, name):
            timer = getattr(self, name, None)
            if timer is not None:
                timer.cancel()
                setattr(self, name, None)

        def data_received(self, data):
            if self.cycle is None or self.cycle.response_complete:
                self._start_header_timer()  # a new request's first bytes
            super().data_received(data)
            self._rearm()

        def handle_events(self):
            super().handle_events()
            self._rearm()

        def _rearm(self):
            cycle = self.cycle
            if cycle is None or cycle.response_complete:
                return
            if cycle is not self._timed_cycle:  # this request's headers are in
                self._timed_cycle = cycle
                self._cancel("_header_timer")
                self._cancel("_body_timer")
                if cycle.more_body:
                    self._body_timer = self.loop.call_later(body_timeout, self._timed_out,
                                                            "body", body_timeout)
            elif not cycle.more_body:
                self._cancel("_body_timer")

        def connection_lost(self, exc):
            self._cancel("_header_timer")
            self._cancel("_body_timer")
            super().connection_lost(exc)

        def _timed_out(self, what, seconds):
            if what == "headers":
                self._header_timer = None
            else:
                self._body_timer = None
            if self.transport.is_closing():
                return
            if self.cycle is None or self.cycle.response_complete or (
                    not self.cycle.response_started):
                body = (f'{{"detail": "request {what} not received within {seconds:g} s"}}'
                        ).encode()
                self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: "
                                     b"application/json\r\nconnection: close\r\n"
                                     b"content-length: " + str(len(body)).encode() +
                                     b"\r\n\r\n" + body)
            self.transport.close()

    return TimedH11Protocol


def check_host(host: str, expose: bool) -> str | None:
    """None for a loopback host; otherwise the warning to print (with --expose) or a
    UsageError (without). A wildcard ("", 0, 0.0.0.0, ::) listens on every interface."""
    import ipaddress
    import socket

    if host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host.strip("[]")).is_loopback:
            return None
    except ValueError:
        pass
    if host in WILDCARDS:
        try:
            names = ", ".join(name for _, name in socket.if_nameindex())
        except OSError:
            names = "unknown"
        where = f"every interface ({names})"
    else:
        where = f"{host!r}, not a loopback address"
    if not expose:
        raise click.UsageError(f"--host {host!r} would listen on {where}: anyone who can reach "
                               f"this machine could use the API. Pass --expose as well to mean "
                               f"it, or use --host 127.0.0.1.", )
    return (f"warning: serve listens on {where} (--expose): the API has no authentication; "
            f"anyone who can reach those interfaces can use it.")


class ModelFailed(RuntimeError):
    """The model raised on a valid input (a server fault, answered with 503)."""


class MicroBatcher:
    """One asyncio worker that turns queued single images into batched inference calls."""

    def __init__(self, model, top_k: int, max_batch: int, max_wait_s: float):
        import asyncio

        self.model, self.top_k = model, top_k
        self.max_batch, self.max_wait_s = max_batch, max_wait_s
        self.queue = asyncio.Queue()
        self.batches = 0  # inference calls made (reported by GET /model)
        self.images = 0

    async def predict(self, images) -> list:
        import asyncio

        loop = asyncio.get_running_loop()
        futures = []
        for image in images:
            future = loop.create_future()
            self.queue.put_nowait((image, future))
            futures.append(future)
        return await asyncio.gather(*futures)

    async def run(self) -> None:
        import asyncio

        from tools.inference import predict_batch

        loop = asyncio.get_running_loop()
        while True:
            items = [await self.queue.get()]
            deadline = loop.time() + self.max_wait_s
            while len(items) < self.max_batch:
                if not self.queue.empty():
                    items.append(self.queue.get_nowait())
                    continue
                timeout = deadline - loop.time()
                if timeout <= 0:
                    break
                try:
                    items.append(await asyncio.wait_for(self.queue.get(), timeout))
                except TimeoutError:
                    break
            items = [(img, fut) for img, fut in items if not fut.done()]  # drop cancelled
            if not items:
                continue
            try:
                results = await loop.run_in_executor(inference_executor(), predict_batch,
                                                     self.model, [img for img, _ in items],
                                                     self.top_k)
            except Exception as exc:  # noqa: BLE001 - reported to every waiting request
                results = [ModelFailed(f"{type(exc).__name__}: {exc}")] * len(items)
            self.batches += 1
            self.images += len(items)
            for (_, future), result in zip(items, results, strict=True):
                if future.done():
                    continue
                if isinstance(result, Exception):
                    future.set_exception(result)
                else:
                    future.set_result(result)


def create_app(model, max_bytes: int = MAX_BYTES, max_pixels: int = MAX_PIXELS,
               metrics_path=None, top_k: int = 3, max_batch: int = 32,
               max_wait_ms: float = 5.0, max_decode_mb: float = MAX_DECODE_MB,
               limit_concurrency: int = LIMIT_CONCURRENCY):
    """The FastAPI app serving a loaded tools.inference.Model."""
    from fastapi import FastAPI

    from tools.inference import describe

    model_info = describe(model, metrics_path)
    state = {"ready": False}
    budget_bytes = int(max_decode_mb * 2**20)
    responses = response_models(model)
    app = FastAPI(title="image-pipeline model API", version=model.version,
                  lifespan=lifespan(model, state, top_k, max_batch, max_wait_ms, budget_bytes),
                  max_body_size=max_bytes, docs_url=None, redoc_url=None,
                  description="Predictions of the exported model. Upload images to /predict.")
    add_offline_docs(app)
    add_guards(app, max_bytes)
    # Outermost: /health and /ready answered first, POST /predict counted (serve_guard.py)
    app.add_middleware(FastPath, state=state, version=model.version, limit=limit_concurrency)
    serving = {"max_bytes": max_bytes, "max_pixels": max_pixels, "max_decode_mb": max_decode_mb,
               "max_batch": max_batch, "top_k": top_k, "limit_concurrency": limit_concurrency}
    add_status_routes(app, model, state, model_info, serving, responses[1])
    add_predict(app, model, responses, max_pixels, budget_bytes)
    return app


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
        status: str  # ok: every file predicted | partial: some have an error instead
        failed: int
        predictions: list[Prediction]

    class Error(BaseModel):
        detail: str

    return PredictResponse, Error


def lifespan(model, state: dict, top_k: int, max_batch: int, max_wait_ms: float,
             budget_bytes: int):
    """The app's start (the micro-batcher's worker, a first inference so /ready means the
    model really runs, the decode budget and threads) and stop."""
    import asyncio
    import contextlib
    import os
    from concurrent.futures import ThreadPoolExecutor

    @contextlib.asynccontextmanager
    async def run(app):
        batcher = MicroBatcher(model, top_k, max_batch, max_wait_ms / 1000)
        worker = asyncio.create_task(batcher.run())
        warmup = model.modality.warmup_input(model.image_size, model.channels)
        await batcher.predict([warmup])  # the model really runs
        app.state.batcher = batcher
        app.state.budget = DecodeBudget(budget_bytes)
        app.state.decoders = ThreadPoolExecutor(os.cpu_count() or 1, "decode",
                                                initializer=nice_thread)
        state["ready"] = True
        yield
        state["ready"] = False
        worker.cancel()
        app.state.decoders.shutdown(wait=False, cancel_futures=True)

    return run


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


def add_status_routes(app, model, state: dict, model_info: dict, serving: dict, Error) -> None:
    """GET /health (the process answers), /ready (the model has run once) and /model (its
    card, the serving limits and how many batches and images it has served)."""
    from fastapi.responses import JSONResponse

    @app.get("/health", summary="Liveness: the process answers")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/ready", summary="Readiness: the model is loaded and has run once",
             responses={503: {"model": Error}})
    async def ready():
        if not state["ready"]:
            return JSONResponse({"detail": "model not loaded yet"}, status_code=503)
        return {"ready": True, "model_version": model.version}

    @app.get("/model", summary="Class names, input size, provenance and eval metrics")
    async def model_card() -> dict:
        batcher = getattr(app.state, "batcher", None)
        stats = {"batches": batcher.batches, "images": batcher.images} if batcher else {}
        stats["predicts_in_flight"] = state.get("in_flight", 0)
        return {**model_info, "serving": {**serving, **stats}}


def add_predict(app, model, responses: tuple, max_pixels: int, budget_bytes: int) -> None:
    """POST /predict: every uploaded file decoded (decode_upload), the usable ones predicted
    in the micro-batcher's batches, one answer per file in upload order."""
    import logging
    from typing import Annotated

    from fastapi import File, HTTPException, UploadFile

    from stages.lib.modality.errors import BadInput

    log = logging.getLogger("uvicorn.error")
    PredictResponse, Error = responses

    @app.post("/predict", response_model=PredictResponse,
              summary="Predict the class of one or more uploaded images",
              responses={413: {"model": Error, "description": "body over the byte limit"},
                         415: {"model": Error, "description": "no file is an image"},
                         422: {"model": Error, "description": "no file is usable (corrupt, "
                                                              "over the pixel limit), or a "
                                                              "bad request"},
                         503: {"model": Error, "description": "the model failed"}})
    async def predict(files: Annotated[list[UploadFile], File(
            description="One or more image files (multipart/form-data, field `files`)")]):
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
            status = 415 if all(kind == "not_image" for kind, _, _ in errors) else 422
            raise HTTPException(status, detail="; ".join(f"{name}: {why}"
                                                         for _, name, why in errors))
        try:
            results = iter(await app.state.batcher.predict([i for i in images if i is not None]))
        except ModelFailed as exc:
            log.error("model failed: %s", exc)
            raise HTTPException(503, detail=f"the model failed: {exc}") from None
        failed = sum(1 for e in errors if e)
        return {"model_version": model.version, "status": "partial" if failed else "ok",
                "failed": failed, "predictions": [
                    {"filename": upload.filename or "", **(
                        model.task.empty_prediction() if error else next(results)),
                     "error": f"{error[0]}: {error[2]}" if error else ""}
                    for upload, error in zip(files, errors, strict=True)]}


async def decode_upload(app, upload, model, max_pixels: int, budget_bytes: int):
    """One upload as the model's input, decoded in the decode threads: its header first (the
    decode's cost, refused past max_pixels or the budget), then the decode itself once that
    cost fits the shared budget. Raises BadInput for a file that cannot be used."""
    import asyncio
    from functools import partial

    source = upload.file  # spooled to disk past 1 MiB: never read whole into memory
    loop = asyncio.get_running_loop()
    cost, draft = await loop.run_in_executor(app.state.decoders, partial(
        model.modality.read_header, source, model.channels, max_pixels, budget_bytes,
        model.image_size))
    await app.state.budget.acquire(cost)
    try:
        return await loop.run_in_executor(app.state.decoders, partial(
            model.modality.read_drafted, source, model.image_size, model.channels, draft,
            model.letterbox))
    finally:
        await app.state.budget.release(cost)


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


@click.command()
@model_options
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on; 127.0.0.1 answers this machine only. Any address "
                   "that is not loopback (\"\", 0, 0.0.0.0, ::, a LAN address) needs --expose.")
@click.option("--expose", is_flag=True,
              help="Allow a --host that is not loopback (a warning names the interfaces).")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True,
              help="TCP port.")
@click.option("--max-bytes", type=click.IntRange(min=1), default=MAX_BYTES, show_default=True,
              help="Largest request body accepted; larger ones get 413.")
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
                   "pixel, with conversion copies) gets 422 (a big JPEG is decoded at a reduced "
                   "scale instead); concurrent decodes together stay within it.")
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
def main(model_path, backend, host, expose, port, max_bytes, max_pixels, metrics_path, top_k,
         max_batch, max_wait_ms, max_decode_mb, header_timeout, body_timeout,
         keep_alive_timeout, limit_concurrency, threads, log_level, score_threshold, beam):
    """Serve the model over HTTP until Ctrl-C.

    Endpoints: POST /predict (multipart field `files`, one or more images) returns per image
    the task's prediction (classification: label, score, top-k) and the model version;
    GET /health (liveness), GET /ready (model loaded: 200, else 503), GET /model (task,
    classes, input size, provenance, eval metrics), GET /docs (OpenAPI UI), /openapi.json.

    A request is answered as a whole: one file that is not an image (415), is corrupt or
    declares more than --max-pixels pixels in its header (422, not decoded) fails the request,
    naming the file.
    """
    warning = check_host(host, expose)  # before anything is loaded
    import uvicorn

    from tools.inference import load

    return_freed_memory()
    # Loaded in the niced inference thread: the backend's threads inherit its priority.
    model = inference_executor().submit(load, backend, model_path, threads).result()
    apply_decode_options(model, score_threshold, beam)
    app = create_app(model, max_bytes, max_pixels, Path(metrics_path), top_k, max_batch,
                     max_wait_ms, max_decode_mb, limit_concurrency)
    if warning:
        click.echo(warning, err=True)
    click.echo(f"serve: {model.path} ({model.backend}, version {model.version}) on "
               f"http://{host}:{port} (docs at /docs)", err=True)
    uvicorn.run(app, host="0.0.0.0" if host == "0" else host, port=port, log_level=log_level,
                http=timed_protocol(header_timeout, body_timeout),
                timeout_keep_alive=keep_alive_timeout)  # the limit is FastPath's, not uvicorn's


if __name__ == "__main__":
    main()
