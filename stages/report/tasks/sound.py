"""Audio players for the run report (audio, speech): an inline, base64 `<audio>` element per clip.

The clips are read from data.source, each checked against its sha256 in data/manifest.csv
(a dependency of the report): the page embeds exactly the bytes the run ingested, and says so
where a file has changed or gone since.
"""
import base64
import csv
import hashlib
from pathlib import Path

MANIFEST = Path("data/manifest.csv")
MIME = {".wav": "audio/wav", ".wave": "audio/wav", ".flac": "audio/flac", ".ogg": "audio/ogg",
        ".oga": "audio/ogg"}


def source_of(facts) -> Path:
    return Path(next((str(v) for k, v, _ in facts.params_rows if k == "data.source"),
                     "data/sample"))


def manifest_hashes(paths: set) -> dict:
    """{path: sha256} of data/manifest.csv's rows for these paths."""
    if not MANIFEST.is_file():
        return {}
    with MANIFEST.open(newline="", encoding="utf-8") as f:
        return {r["path"]: r["sha256"] for r in csv.DictReader(f) if r["path"] in paths}


def player(source: Path, rel: str, sha256: str) -> str:
    """An <audio> element holding the clip's bytes, or why there is none."""
    path = source / rel
    try:
        data = path.read_bytes()
    except OSError:
        return '<span class="muted">not found under data.source</span>'
    if hashlib.sha256(data).hexdigest() != sha256:
        return '<span class="muted">changed since ingest: not shown</span>'
    mime = MIME.get(Path(rel).suffix.lower(), "audio/wav")
    uri = f"data:{mime};base64,{base64.b64encode(data).decode()}"
    return f'<audio controls preload="none" src="{uri}"></audio>'
