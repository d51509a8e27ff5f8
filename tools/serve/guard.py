"""What keeps `tools.serve` answering under load: the status fast path, the predict limit and
the niced worker threads.

- GET /health and GET /ready are answered by the outermost ASGI layer (FastPath), before any
  other middleware, routing or body handling, and are never counted or refused: a server busy
  with predicts, or holding many stalled connections, still answers them at once.
- --limit-concurrency counts POST /predict (and /predict/{name}) requests in flight (from
  their headers to the end of their answer: upload, decode, inference). The request past the
  limit gets 503 with `Retry-After: 1` at once. Connections are not counted: an idle or
  stalled connection costs no slot, and is closed by --header-timeout / --keep-alive-timeout
  instead (uvicorn's own limit_concurrency counts connections and tasks together, so idle
  sockets took the slots).
- Decodes and inference run in their own threads at nice 10 (inference in one thread, made
  before the model is loaded, so onnxruntime's pool threads inherit the nice value): the event
  loop, which parses requests and answers /health, gets the cores first.
"""
import json

RETRY_AFTER_S = 1
STATUS_PATHS = ("/health", "/ready")


def nice_thread() -> None:
    """Lower this thread's CPU priority (Linux applies nice per thread, and threads this one
    starts inherit it)."""
    import os
    import threading

    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (OSError, AttributeError):
        pass


_inference = None


def inference_executor():
    """The one niced thread that loads the model and runs every inference call (so the
    backend's own threads, started at load, are niced too)."""
    global _inference
    from concurrent.futures import ThreadPoolExecutor

    if _inference is None:
        _inference = ThreadPoolExecutor(1, "inference", initializer=nice_thread)
    return _inference


async def send_json(send, status: int, body: dict, headers=()) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
        *headers]})
    await send({"type": "http.response.body", "body": data})


class FastPath:
    """Outermost ASGI layer: /health and /ready answered here; POST /predict counted against
    `limit` (503 past it); everything else passed on untouched."""

    def __init__(self, app, state: dict, version: str, limit: int):
        self.app, self.state, self.version, self.limit = app, state, version, limit
        state["in_flight"] = 0  # POST /predict requests being received, decoded, predicted

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope["path"], scope["method"]
        if method == "GET" and path in STATUS_PATHS:
            if path == "/health":
                return await send_json(send, 200, {"status": "ok"})
            if not self.state["ready"]:
                return await send_json(send, 503, {"detail": "model not loaded yet"})
            return await send_json(send, 200, {"ready": True, **self.state.get(
                "ready_body", {"model_version": self.version})})
        if method != "POST" or not (path == "/predict" or path.startswith("/predict/")):
            return await self.app(scope, receive, send)
        if self.state["in_flight"] >= self.limit:
            return await send_json(send, 503, {
                "detail": f"{self.limit} predict requests in flight, the limit "
                          f"(--limit-concurrency {self.limit}): retry in {RETRY_AFTER_S} s"},
                [(b"retry-after", str(RETRY_AFTER_S).encode())])
        self.state["in_flight"] += 1
        counted = True

        def done():  # once: when the answer's last byte is sent, or the app gives up
            nonlocal counted
            if counted:
                counted = False
                self.state["in_flight"] -= 1

        async def sending(message):
            # The slot is free as soon as the answer is out: a keep-alive client's next
            # request may arrive before this coroutine has unwound.
            if message["type"] == "http.response.body" and not message.get("more_body"):
                done()
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            done()
