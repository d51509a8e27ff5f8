"""How `tools.serve` spends memory and the model's time: decodes wait on a budget counted in
bytes (DecodeBudget), and queued images of concurrent requests are predicted together
(MicroBatcher): a single worker collects them until it has --max-batch or --max-wait-ms passed
since the first, then runs one inference call in the niced inference thread (guard.py).
"""
from tools.serve.guard import inference_executor


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
