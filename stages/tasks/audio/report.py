"""The audio task's part of the run report: classification's evaluation section (headline,
per-class scores, confusion matrix, the bad cases' sheet, here spectrograms), plus a player
(an inline, base64 `<audio>` element) for each of the worst cases.

The clips are read from data.source, each checked against its sha256 in data/manifest.csv
(a dependency of the report): the page embeds exactly the bytes the run ingested, and says so
where a file has changed or gone since.
"""
import base64
import csv
import hashlib
from pathlib import Path

from stages.report.html import esc
from stages.tasks.classification import report as shared

PLAYERS = 8  # worst cases with a player
MANIFEST = Path("data/manifest.csv")
MIME = {".wav": "audio/wav", ".wave": "audio/wav", ".flac": "audio/flac", ".ogg": "audio/ogg",
        ".oga": "audio/ogg"}


def headline(facts) -> list:
    return [("test top-1", facts.eval.get("accuracy")),
            ("balanced accuracy", facts.eval.get("balanced_accuracy"))]


def sections(facts) -> list:
    return [("evaluation", "Evaluation", shared.evaluation(facts) + players(facts))]


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


def players(facts) -> str:
    rows = shared.eval_file(facts, "bad_cases.csv")[:PLAYERS]
    if not rows:
        return ""
    hashes = manifest_hashes({r["path"] for r in rows})
    source = source_of(facts)
    items = "".join(
        f"<tr><td><code>{esc(r['path'])}</code></td><td>{esc(r['true'])}</td>"
        f"<td>{esc(r['predicted'])}</td><td>{esc(r['confidence'])}</td>"
        f"<td>{player(source, r['path'], hashes.get(r['path'], ''))}</td></tr>"
        for r in rows)
    return (f"<h3>Listen to the worst cases <span class=\"muted small\">(the {len(rows)} most "
            f"confident mistakes)</span></h3>\n<table class=\"narrow\"><thead><tr><th>path</th>"
            f"<th>actual</th><th>predicted</th><th>confidence</th><th>clip</th></tr></thead>"
            f"<tbody>{items}</tbody></table>")
