"""How `tools.serve` spends memory and the model's time: decodes wait on a budget counted in
bytes, in a bounded queue (DecodeBudget: past it, 503 with Retry-After at once), and queued
images of concurrent requests are predicted together (MicroBatcher): a single worker collects
them until it has --max-batch or --max-wait-ms passed since the first, then runs one
inference call in the niced inference thread (guard.py).
"""
from tools.serve.guard import RETRY_AFTER_S, inference_executor

PRIOR_SPEED = 100 * 2**20  # bytes of decode cost per second, until a decode has been timed


class Busy(Exception):
    """A request the server cannot take now (answered 503 with Retry-After: retry_after s)."""

    def __init__(self, detail: str, retry_after: int):
        super().__init__(detail)
        self.detail, self.retry_after = detail, retry_after


class DecodeBudget:
    """Admission control for decodes, counted in bytes (each decode's cost from its header).

    Decodes run while their costs together fit `total` (one alone always may); the others wait
    in a FIFO queue, whose costs together may not pass `queue_total`: a decode that would
    overflow it is refused at once (Busy: 503 with Retry-After), so no request waits behind
    more work than the server can do in its time. Retry-After is the time the work running
    and queued takes at the decode speed measured so far (decode cost per second of decoding;
    PRIOR_SPEED before a decode has ended), 1 to 60 s."""

    def __init__(self, total: int, queue_total: int):
        self.total, self.queue_total = total, queue_total
        self.used = self.queued = 0
        self.waiters = []  # FIFO of [cost, future]
        self.decoded, self.busy_s, self.busy_since = 0, 0.0, None

    def fits(self, cost: int) -> bool:
        return self.used + cost <= self.total or not self.used

    def retry_after(self) -> int:
        """Seconds until the work now running and queued is likely done (1 to 60)."""
        import math
        import time

        busy = self.busy_s + (time.monotonic() - self.busy_since if self.busy_since else 0)
        speed = self.decoded / busy if self.decoded and busy > 0 else PRIOR_SPEED
        return max(RETRY_AFTER_S, min(60, math.ceil((self.used + self.queued) / speed)))

    async def acquire(self, cost: int) -> None:
        """Wait for cost bytes of the budget (FIFO); Busy when the queue cannot take them."""
        import asyncio

        if not self.waiters and self.fits(cost):
            return self._take(cost)
        if self.queued + cost > self.queue_total:
            mb = 2**20
            raise Busy(f"the decode queue is full ({self.queued / mb:.0f} MiB of images "
                       f"waiting, {self.used / mb:.0f} MiB decoding; this image needs "
                       f"{cost / mb:.0f} MiB of --max-queued-decode-mb "
                       f"{self.queue_total / mb:.0f}): retry in {self.retry_after()} s",
                       self.retry_after())
        waiter = [cost, asyncio.get_running_loop().create_future()]
        self.waiters.append(waiter)
        self.queued += cost
        try:
            await waiter[1]
        except asyncio.CancelledError:
            if waiter[1].done() and not waiter[1].cancelled():
                self.release(cost, decoded=False)  # granted as the request gave up
            elif waiter in self.waiters:
                self.waiters.remove(waiter)
                self.queued -= cost
                self._wake()  # the next in line may fit now
            raise

    def _take(self, cost: int) -> None:
        import time

        if not self.used:
            self.busy_since = time.monotonic()
        self.used += cost

    def _wake(self) -> None:
        while self.waiters and self.fits(self.waiters[0][0]):
            cost, future = self.waiters.pop(0)
            self.queued -= cost
            if future.done():  # cancelled: its request gave up waiting
                continue
            self._take(cost)
            future.set_result(None)

    def release(self, cost: int, decoded: bool = True) -> None:
        """Give cost bytes back (when a decode's thread has finished, not before) and start
        the decodes that now fit. Called in the event loop's thread."""
        import time

        self.used -= cost
        if decoded:
            self.decoded += cost
        if not self.used and self.busy_since is not None:
            self.busy_s += time.monotonic() - self.busy_since
            self.busy_since = None
        self._wake()


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
