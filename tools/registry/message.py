"""The tag message of a registered version: one summary line, then `key: value` lines (JSON for
the mappings), sorted and free of paths and timestamps, so `show` and people read the same."""
import json

KEYS = ("headline", "metrics", "data", "split", "kernels", "params")


def compose(name: str, version: str, facts: dict) -> str:
    """The message for name@version from facts (keys: KEYS)."""
    lines = [f"{name} {version}: {facts['headline'] or 'no headline metric'}", ""]
    for key in KEYS:
        value = facts[key]
        text = json.dumps(value, sort_keys=True) if isinstance(value, dict) else str(value)
        lines.append(f"{key}: {text}")
    return "\n".join(lines) + "\n"


def parse(message: str) -> dict:
    """{key: value} of a message compose() wrote; {} for a tag another tool wrote."""
    out = {}
    for line in (message or "").splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in KEYS:
            out[key] = json.loads(value) if value.startswith("{") else value
    return out
