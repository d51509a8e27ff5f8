"""What `tools.serve` is told: one ServeConfig, built once from the command line's options
(`ServeConfig.from_options`) and read by the app, its routes and the server. Its defaults are
the options' defaults, so `create_app(model)` serves as `python -m tools.serve` does."""
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from stages.lib.params import MAX_PIXELS

MAX_BYTES = 20 * 1024 * 1024
MAX_DECODE_MB = 256
QUEUED_DECODES = 8  # --max-queued-decode-mb's default: this many times --max-decode-mb
PREDICT_TIMEOUT = 30.0
LIMIT_CONCURRENCY = 64
HEADER_TIMEOUT, BODY_TIMEOUT, KEEP_ALIVE_TIMEOUT = 10.0, 30.0, 5
# what GET /model shows of the limits (its `serving` part)
SHOWN = ("max_bytes", "max_pixels", "max_decode_mb", "max_queued_decode_mb", "predict_timeout",
         "max_batch", "top_k", "limit_concurrency")


@dataclass(frozen=True)
class ServeConfig:
    """Every serving setting; one per server. The field names are the options' (--max-bytes:
    max_bytes); max_queued_decode_mb None means QUEUED_DECODES x max_decode_mb."""

    # the requests: bytes, pixels (or the modality's frames), decode memory, time
    max_bytes: int = MAX_BYTES
    max_pixels: int = MAX_PIXELS
    max_decode_mb: float = MAX_DECODE_MB
    max_queued_decode_mb: float | None = None
    predict_timeout: float = PREDICT_TIMEOUT
    limit_concurrency: int = LIMIT_CONCURRENCY
    # the answers and the micro-batches
    top_k: int = 3
    max_batch: int = 32
    max_wait_ms: float = 5.0
    metrics_path: Path | None = None  # shown by GET /model when the file exists
    project: str = ""  # the API's title names it (the folder served from)
    # the server: where it listens and its connections' deadlines (transport.py)
    host: str = "127.0.0.1"
    port: int = 8000
    header_timeout: float = HEADER_TIMEOUT
    body_timeout: float = BODY_TIMEOUT
    keep_alive_timeout: int = KEEP_ALIVE_TIMEOUT
    log_level: str = "info"

    def __post_init__(self):
        if self.max_queued_decode_mb is None:
            object.__setattr__(self, "max_queued_decode_mb",
                               QUEUED_DECODES * self.max_decode_mb)
        if self.metrics_path is not None:
            object.__setattr__(self, "metrics_path", Path(self.metrics_path))

    @classmethod
    def from_options(cls, options: dict, **more) -> "ServeConfig":
        """The config of the command line's options (click's keyword arguments: those that
        are no field, such as --model, are left out), and more."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in {**options, **more}.items() if k in names})

    @property
    def budget_bytes(self) -> int:
        """The decode budget (--max-decode-mb) in bytes."""
        return int(self.max_decode_mb * 2**20)

    @property
    def queue_bytes(self) -> int:
        """The decode work that may wait for the budget (--max-queued-decode-mb), in bytes."""
        return int(self.max_queued_decode_mb * 2**20)

    def shown(self) -> dict:
        """The limits GET /model shows."""
        values = asdict(self)
        return {name: values[name] for name in SHOWN}
