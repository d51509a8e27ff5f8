"""POST /predict and POST /predict/{name}: one handler (Predict) that both routes call with the
Served slot the request took (app.pick).

Every uploaded file is decoded (its header first, then the decode once the shared budget
admits its cost) and the usable ones are predicted in the micro-batcher's batches; the answer
has one prediction per file in upload order, a file that cannot be used carrying its error
(`kind: why`; 200, status `partial`). When no file is usable the request fails with the
status of its files' kind (stages/lib/modality/errors.py KINDS, the one place it is written),
the detail naming every file. Within --predict-timeout of its body's end, or 503 with
Retry-After: so is a request the decode queue cannot take.
"""
from tools.serve.batching import Busy, ModelFailed


class Predict:
    """The predict handler: `await Predict(app, config)(files, served)` is the answer."""

    def __init__(self, app, config):
        from stages.lib import hooks

        self.app, self.config = app, config
        self.delay = float(hooks.value("SERVE_DELAY_S") or 0)  # a test hook: hold the model

    async def __call__(self, files, served) -> dict:
        """One request on the slot it took (and keeps to its end, whatever a reload does)."""
        import asyncio

        from fastapi import HTTPException

        served.in_flight += 1
        try:
            async with asyncio.timeout(self.config.predict_timeout):
                if self.delay:
                    await asyncio.sleep(self.delay)
                return await self.answer(files, served)
        except Busy as exc:
            raise HTTPException(503, detail=exc.detail,
                                headers={"Retry-After": str(exc.retry_after)}) from None
        except TimeoutError:
            wait = self.app.state.budget.retry_after()
            raise HTTPException(503, headers={"Retry-After": str(wait)}, detail=(
                f"no answer within --predict-timeout {self.config.predict_timeout:g} s: the "
                f"server is busy; retry in {wait} s")) from None
        finally:
            served.in_flight -= 1

    async def answer(self, files, served) -> dict:
        """The answer to the files (refused when none is usable)."""
        import logging

        from fastapi import HTTPException

        inputs, errors = await self.decode_all(files, served.model)
        if all(errors):
            refuse(errors)
        try:
            results = iter(await served.batcher.predict([x for x in inputs if x is not None]))
        except ModelFailed as exc:
            logging.getLogger("uvicorn.error").error("model failed: %s", exc)
            raise HTTPException(503, detail=f"the model failed: {exc}") from None
        task = served.model.task
        failed = sum(1 for e in errors if e)
        return {"model_version": served.model.version, **served.answer_fields(),
                "status": "partial" if failed else "ok", "failed": failed, "predictions": [
                    {"filename": upload.filename or "",
                     **(task.empty_prediction() if error else next(results)),
                     "error": f"{error[0]}: {error[2]}" if error else ""}
                    for upload, error in zip(files, errors, strict=True)]}

    async def decode_all(self, files, model) -> tuple[list, list]:
        """(per file: its model input or None, and its error (kind, name, why) or None)."""
        from stages.lib.modality.errors import BadInput

        inputs, errors = [], []
        for index, upload in enumerate(files):
            try:
                inputs.append(await self.decode(upload, model))
                errors.append(None)
            except BadInput as exc:
                inputs.append(None)
                errors.append((exc.kind, upload.filename or f"file #{index + 1}", str(exc)))
        return inputs, errors

    async def decode(self, upload, model):
        """One upload as the model's input, decoded off the event loop: its header first (in
        the header threads: the decode's cost, refused past the modality's input limit or
        the budget), then, once that cost is admitted to the shared budget
        (batching.DecodeBudget; Busy when its queue is full), the decode itself in the
        decode threads. The budget is given back when the decode's thread ends, even when
        the request stopped waiting for it (its deadline passed): memory stays bounded.
        Raises BadInput for a file it cannot use."""
        import asyncio
        from functools import partial

        from tools.inference import input_limit

        source = upload.file  # spooled to disk past 1 MiB: never read whole into memory
        loop, state = asyncio.get_running_loop(), self.app.state
        limit = input_limit(model, self.config.max_pixels)
        cost, draft = await loop.run_in_executor(state.headers, partial(
            model.modality.read_header, source, model.spec, limit, self.config.budget_bytes))
        await state.budget.acquire(cost)
        decode = loop.run_in_executor(state.decoders, partial(  # draft: a reduced decode
            model.modality.read, source, model.spec, limit, draft))

        def done(future):
            state.budget.release(cost, decoded=not future.cancelled())
            if not future.cancelled():
                future.exception()  # retrieved: a request that gave up leaves no warning

        decode.add_done_callback(done)
        return await asyncio.shield(decode)


def refuse(errors: list) -> None:
    """No file is usable: the request fails with its files' kinds' status, naming each."""
    from fastapi import HTTPException

    from stages.lib.modality.errors import request_status

    raise HTTPException(request_status(kind for kind, _, _ in errors),
                        detail="; ".join(f"{name}: {why}" for _, name, why in errors))


def bad_input_responses(Error, modalities) -> dict:
    """The OpenAPI `responses` of the bad-input statuses, from errors.KINDS: each status with
    its kinds and what they mean, in the words of the served modalities (their names)."""
    from stages.lib.modality.errors import KINDS, MIXED_STATUS, meaning

    said = {}  # status: [what the files' kinds mean], [what the request's kinds mean]
    for kind, (status, _) in KINDS.items():
        said.setdefault(status, ([], []))[kind == "body_too_large"].append(
            f"{kind}: {meaning(kind, modalities)}")
    out = {}
    for status, (files, request) in said.items():
        text = " or ".join([f"no file is usable ({'; '.join(files)})"] if files else [])
        out[status] = {"model": Error, "description": " or ".join(
            ([text] if text else []) + [f"the request is refused ({r})" for r in request])}
    out[MIXED_STATUS]["description"] += (", or the files are refused for kinds of different "
                                         "statuses, or the request is malformed")
    return out
