"""Several models in one server, and swapping in a new version without failing a request.

`python -m tools.serve --model detector#prod --model ocr#prod` serves each registered model
under its artifact name (POST /predict/{name}, GET /models, GET /model/{name}); a single
model is also the one POST /predict and GET /model serve. Each model is a Served slot: the
loaded model, its micro-batcher (and the asyncio task running it) and the requests in flight
on it. A request takes the slot once, at its start, and uses that slot's model and batcher
to its end.

POST /admin/reload (loopback clients only) or SIGHUP re-resolves every registered model
(`--model ocr#prod`: what prod means now), fetches and loads a version that changed, runs it
once, then swaps the slot in one step of the event loop: requests that began before it finish
on the old model (whose batcher runs until they are done, then stops), the next ones get the
new. A reload that fails (a corrupt object, an unreachable registry) changes nothing and says
why. Reloads run one at a time.
"""
from dataclasses import dataclass, field

from tools.serve.batching import MicroBatcher

ANSWERED = ("artifact", "version", "stage", "commit", "data_version")  # of a registered model


@dataclass
class Loader:
    """How to (re)load one --model: a file path, or a registry reference re-resolved on
    every reload."""

    text: str | None
    registry: str | None
    backend: str
    threads: int
    score_threshold: float | None = None
    beam: int | None = None
    max_seconds: float = 0.0  # --max-seconds: a sound model's longest clip
    min_confidence: float | None = None

    @property
    def registered(self) -> bool:
        from tools.registry.models import parse

        return parse(self.text) is not None

    def fetch(self):
        """(local file, registry facts): resolution and fetch (git and the DVC remote; run in
        a plain thread, never the inference thread)."""
        from tools.registry.models import fetch

        return fetch(self.text, self.registry)

    def load(self, path, facts):
        """The loaded model (run in the inference thread, so the backend's threads are niced)."""
        from tools.inference import load
        from tools.options import apply_decode_options

        model = load(self.backend, path, self.threads)
        model.registry = facts
        apply_decode_options(model, self.score_threshold, self.beam, self.min_confidence)
        model.max_seconds = self.max_seconds
        return model


def loopback(host: str | None) -> bool:
    """Whether a client's address is this machine's loopback (127.0.0.0/8, ::1, and IPv4
    loopback mapped into IPv6)."""
    import ipaddress

    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def name_of(model, default: str) -> str:
    """The name a model is served under: its artifact's, else default."""
    return model.registry.get("artifact") if model.registry else default


def identity(model) -> tuple:
    """What makes a version another one: its registered version, commit and bytes."""
    r = model.registry
    return (r.get("version"), r.get("commit"), r.get("md5")) if r else (model.sha256,)


@dataclass
class Served:
    """One model being served."""

    name: str
    model: object
    card: dict
    loader: Loader | None = None
    batcher: MicroBatcher | None = None
    worker: object = None  # the asyncio task running batcher.run()
    in_flight: int = 0
    retired: bool = field(default=False)

    def answer_fields(self) -> dict:
        """What each answer of this model carries besides the predictions."""
        r = self.model.registry
        return {"model": self.name, "registry": {k: r[k] for k in ANSWERED} if r else None}


async def start(served: Served, top_k: int, max_batch: int, max_wait_s: float) -> None:
    """Its micro-batcher and worker, and a first inference: the model really runs."""
    import asyncio

    served.batcher = MicroBatcher(served.model, top_k, max_batch, max_wait_s)
    served.worker = asyncio.create_task(served.batcher.run())
    warmup = served.model.modality.warmup_input(served.model.spec)
    await served.batcher.predict([warmup])


async def retire(served: Served) -> None:
    """Stop an old slot's batcher once the requests that took it are answered."""
    import asyncio

    served.retired = True
    while served.in_flight:
        await asyncio.sleep(0.02)
    served.worker.cancel()


async def reload(app) -> dict:
    """Swap in every registered model whose reference now means another version:
    {"reloaded": {name: {"from", "to"}}, "unchanged": [names]}. Raises ReloadFailed (and
    swaps nothing) when one cannot be fetched or loaded."""
    import asyncio

    from tools.inference import describe
    from tools.serve.guard import inference_executor

    async with app.state.reload_lock:
        loop = asyncio.get_running_loop()
        new, unchanged = {}, []
        for name, served in app.state.served.items():
            if served.loader is None or not served.loader.registered:
                unchanged.append(name)
                continue
            try:
                path, facts = await loop.run_in_executor(None, served.loader.fetch)
                if (facts.get("version"), facts.get("commit"), facts.get("md5")) == \
                        identity(served.model):
                    unchanged.append(name)
                    continue
                model = await loop.run_in_executor(inference_executor(), served.loader.load,
                                                   path, facts)
                fresh = Served(name, model, describe(model, app.state.metrics_path),
                               served.loader)
                new[name] = fresh  # stopped below if it (or a later one) fails
                await start(fresh, *app.state.batching)  # its first inference
            except Exception as exc:  # noqa: BLE001 - reported, nothing swapped
                for started in new.values():  # the slots started for this reload
                    if started.worker is not None:
                        started.worker.cancel()
                why = " ".join(str(getattr(exc, "message", None) or exc or
                                   type(exc).__name__).split())
                raise ReloadFailed(f"{name}: {why[:2000]}") from None
        reloaded = {}
        for name, fresh in new.items():  # one step of the event loop: no request sees half
            old = app.state.served[name]
            app.state.served[name] = fresh
            reloaded[name] = {"from": version_of(old.model), "to": version_of(fresh.model)}
            asyncio.create_task(retire(old))
        app.state.ready_body.update(ready_body(app.state.served))
        return {"reloaded": reloaded, "unchanged": sorted(unchanged)}


def version_of(model) -> str:
    return model.registry["version"] if model.registry else model.version


def ready_body(served: dict) -> dict:
    """What GET /ready adds to {"ready": true}: the model version (one model), or each
    model's."""
    if len(served) == 1:
        return {"model_version": next(iter(served.values())).model.version}
    return {"models": {name: s.model.version for name, s in sorted(served.items())}}


class ReloadFailed(RuntimeError):
    """A reload that changed nothing (the reason names the model)."""
