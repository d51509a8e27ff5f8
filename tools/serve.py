"""A local HTTP API for the exported model: FastAPI on uvicorn, 127.0.0.1 by default.

Not a DVC stage. POST /predict takes one or more uploaded images (multipart field `files`).
Images of concurrent requests are micro-batched: a single worker collects queued images until
it has --max-batch of them or --max-wait-ms passed since the first, then runs one inference
call in a thread, so many small requests share one onnxruntime call.

Bad input never causes a 5xx: 413 for a body over --max-bytes (by Content-Length or counted
while streaming), 415 for a file that is not an image, 422 for a corrupt image, an image over
--max-pixels (checked from its header, before decoding) or a malformed request. No endpoint
takes a path: nothing on the server's disk can be read through the API.
"""
from pathlib import Path

import click

from stages.lib.params import MAX_PIXELS
from tools.options import model_options

MAX_BYTES = 20 * 1024 * 1024


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
                results = await asyncio.to_thread(
                    predict_batch, self.model, [img for img, _ in items], self.top_k)
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
               max_wait_ms: float = 5.0):
    """The FastAPI app serving a loaded tools.inference.Model."""
    import asyncio
    import contextlib
    import io
    import logging
    from typing import Annotated

    import numpy as np
    from fastapi import FastAPI, File, HTTPException, Request, UploadFile
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel, create_model

    from tools.inference import BadImage, describe, read_image

    log = logging.getLogger("uvicorn.error")
    model_info = describe(model, metrics_path)
    state = {"ready": False}

    # One image's answer: its filename and the task's prediction fields (classification:
    # label, score, topk), typed for the OpenAPI schema.
    types = {"string": str, "number": float, "integer": int, "boolean": bool, "array": list,
             "object": dict}
    Prediction = create_model("Prediction", filename=(str, ...), **{
        name: (types[kind], ...) for name, kind in model.task.prediction_fields.items()})

    class PredictResponse(BaseModel):
        model_version: str
        predictions: list[Prediction]

    class Error(BaseModel):
        detail: str

    @contextlib.asynccontextmanager
    async def lifespan(app):
        batcher = MicroBatcher(model, top_k, max_batch, max_wait_ms / 1000)
        worker = asyncio.create_task(batcher.run())
        size = (model.image_size, model.image_size, model.channels)
        await batcher.predict([np.zeros(size, dtype=np.uint8)])  # the model really runs
        app.state.batcher = batcher
        state["ready"] = True
        yield
        state["ready"] = False
        worker.cancel()

    app = FastAPI(title="image-pipeline model API", version=model.version, lifespan=lifespan,
                  max_body_size=max_bytes,
                  description="Predictions of the exported model. Upload images to /predict.")

    @app.middleware("http")
    async def refuse_large_bodies(request: Request, call_next):
        # Checked before a byte of the body is read; FastAPI's max_body_size (above) also
        # counts the bytes of a streamed body that has no Content-Length.
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > max_bytes:
            return JSONResponse({"detail": f"request body of {length} bytes is over the limit "
                                           f"of {max_bytes} bytes"}, status_code=413)
        return await call_next(request)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        # Anything not handled below came out of parsing a request we did not foresee: answer
        # 400 rather than 500, and log it loudly (the fuzz test fails on this log line).
        log.error("unhandled %s on %s %s", type(exc).__name__, request.method, request.url.path,
                  exc_info=exc)
        return JSONResponse({"detail": f"cannot process this request ({type(exc).__name__})"},
                            status_code=400)

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
        return {**model_info, "serving": {"max_bytes": max_bytes, "max_pixels": max_pixels,
                                          "max_batch": max_batch, "top_k": top_k, **stats}}

    @app.post("/predict", response_model=PredictResponse,
              summary="Predict the class of one or more uploaded images",
              responses={413: {"model": Error, "description": "body over the byte limit"},
                         415: {"model": Error, "description": "a file is not an image"},
                         422: {"model": Error, "description": "corrupt image, image over the "
                                                              "pixel limit, bad request"},
                         503: {"model": Error, "description": "the model failed"}})
    async def predict(files: Annotated[list[UploadFile], File(
            description="One or more image files (multipart/form-data, field `files`)")]):
        images = []
        for index, upload in enumerate(files):
            name = upload.filename or f"file #{index + 1}"
            data = await upload.read()
            try:
                images.append(await asyncio.to_thread(
                    read_image, io.BytesIO(data), model.image_size, model.channels, max_pixels))
            except BadImage as exc:
                raise HTTPException(415 if exc.kind == "not_image" else 422,
                                    detail=f"{name}: {exc}") from None
        try:
            results = await app.state.batcher.predict(images)
        except ModelFailed as exc:
            log.error("model failed: %s", exc)
            raise HTTPException(503, detail=f"the model failed: {exc}") from None
        return {"model_version": model.version, "predictions": [
            {"filename": upload.filename or "", **prediction}
            for upload, prediction in zip(files, results, strict=True)]}

    return app


@click.command()
@model_options
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on; 127.0.0.1 answers this machine only.")
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
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info"]),
              default="info", show_default=True, help="uvicorn's log level.")
def main(model_path, backend, host, port, max_bytes, max_pixels, metrics_path, top_k,
         max_batch, max_wait_ms, threads, log_level):
    """Serve the model over HTTP until Ctrl-C.

    Endpoints: POST /predict (multipart field `files`, one or more images) returns per image
    the task's prediction (classification: label, score, top-k) and the model version;
    GET /health (liveness), GET /ready (model loaded: 200, else 503), GET /model (task,
    classes, input size, provenance, eval metrics), GET /docs (OpenAPI UI), /openapi.json.

    A request is answered as a whole: one file that is not an image (415), is corrupt or
    declares more than --max-pixels pixels in its header (422, not decoded) fails the request,
    naming the file.
    """
    import uvicorn

    from tools.inference import load

    model = load(backend, model_path, threads)
    app = create_app(model, max_bytes, max_pixels, Path(metrics_path), top_k, max_batch,
                     max_wait_ms)
    click.echo(f"serve: {model.path} ({model.backend}, version {model.version}) on "
               f"http://{host}:{port} (docs at /docs)", err=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level)


if __name__ == "__main__":
    main()
