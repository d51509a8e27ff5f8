"""Assign every usable file to train, val or test: a split that never drifts and never leaks.

By hash (default): a file's split is a pure function of (content hash, split.seed), so adding
images never moves an existing one and the test set stays fixed as data grows. Files that must
not straddle splits (identical content, near-duplicates by perceptual hash, a shared `group`
value from labels.csv) form a group, and the whole group takes the split of its smallest member
hash; an old file moves only when new data joins its group, and the log says so.
By time: groups are ordered by their latest `timestamp` and cut chronologically, train before
val before test, so no future data leaks into training.
Quarantined and broken files never reach a split. Files are listed, never moved.
"""
import hashlib
import json
from collections import Counter
from datetime import datetime
from pathlib import Path

import click

from stages.lib.io import StageError, read_csv, write_bytes, write_csv, write_json
from stages.lib.params import load, params_option

MANIFEST = Path("data/manifest.csv")
QUARANTINE = Path("data/quarantine.csv")
OUT_DIR = Path("data/split")
METRICS = Path("metrics/split.json")
LAST_DIR = Path(".cache/split")  # previous assignment, only to log moves (not an out)
SPLITS = ("train", "val", "test")


def split_fields(task) -> list[str]:
    """The split lists' columns: path, the task's annotation columns, sha256."""
    return ["path", *task.annotation_fields, "sha256"]


def assign(sha256: str, seed: int, val: float, test: float) -> str:
    """Map a content hash to a split; uniform in [0, 1) and stable for a given seed."""
    u = int(hashlib.sha256(f"{seed}:{sha256}".encode()).hexdigest()[:15], 16) / 16**15
    return "test" if u < test else "val" if u < test + val else "train"


def parse_time(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return datetime.fromisoformat(value).timestamp()


def by_time(rows, keys, val, test) -> dict[str, str]:
    """{group key: split}, cutting groups ordered by their latest timestamp."""
    bad = []
    latest, size = {}, Counter()
    for r in rows:
        try:
            t = parse_time(r.get("timestamp") or "")
        except ValueError:
            bad.append(r["path"])
            continue
        k = keys[r["path"]]
        latest[k] = max(latest.get(k, t), t)
        size[k] += 1
    if bad:
        raise StageError(f"split.by is time, but {len(bad)} files have no valid ISO 8601 or "
                         f"numeric `timestamp` in labels.csv: " + ", ".join(sorted(bad)))
    out, done, total = {}, 0, len(rows)
    for k in sorted(latest, key=lambda k: (latest[k], k)):
        u = done / total  # where the group starts on the time line
        out[k] = "train" if u < 1 - val - test else "val" if u < 1 - test else "test"
        done += size[k]
    return out


def split_rows(rows, seed, val, test, by="hash", distance=-1,
               fields=("path", "label", "sha256")) -> dict[str, list[dict]]:
    """{split: rows (only `fields`) sorted by path}; groups (see stages.lib.groups) never
    straddle splits."""
    from stages.lib.groups import group_keys

    keys = group_keys(rows, distance)
    if by == "time":
        where = by_time(rows, keys, val, test)
    else:
        where = {k: assign(k, seed, val, test) for k in set(keys.values())}
    out = {name: [] for name in SPLITS}
    for r in sorted(rows, key=lambda r: r["path"]):
        out[where[keys[r["path"]]]].append({k: r[k] for k in fields})
    return out


def moved(previous: dict, splits) -> list[str]:
    """Log lines for files that were split before, with the same content, and now moved."""
    lines = []
    for name, part in splits.items():
        for r in part:
            old = previous.get(r["path"])
            if old and old[0] == r["sha256"] and old[1] != name:
                lines.append(f"split: {r['path']} moved {old[1]} -> {name}: new data joined its "
                             f"group (same content, near-duplicate or shared `group`)")
    return lines


@click.command()
@params_option
def main(params_path):
    """Write data/split/{train,val,test}.csv and metrics/split.json from the manifest.

    Reads `task`, `split.by` (hash | time), `split.seed`, `split.val` and `split.test`
    (fractions), and `validate.near_dup_distance` (near-duplicates share a split). Files listed
    in data/quarantine.csv or with an error in the manifest are left out.
    """
    from stages.tasks import current

    p = load("split", params_path)
    task = current(params_path)
    distance = load("validate", params_path).near_dup_distance
    quarantined = {r["path"] for r in read_csv(QUARANTINE)}
    rows = [r for r in read_csv(MANIFEST) if not r["error"] and r["path"] not in quarantined]
    fields = split_fields(task)
    splits = split_rows(rows, p.seed, p.val, p.test, p.by, distance, fields)
    for name, part in splits.items():
        if not part:
            raise StageError(f"split: the {name} split is empty; add data or raise split.{name}.")
        write_csv(OUT_DIR / f"{name}.csv", part, fields)
    last = LAST_DIR / f"{p.by}-{p.seed}-{p.val}-{p.test}-{distance}.json"
    previous = json.loads(last.read_text()) if last.exists() else {}
    for line in moved(previous, splits):
        click.echo(line)
    write_bytes(last, json.dumps({r["path"]: [r["sha256"], name] for name, part in splits.items()
                                  for r in part}).encode())
    counts = {name: dict(sorted(task.label_counts(part).items()))
              for name, part in splits.items()}
    write_json(METRICS, counts)
    click.echo("split: " + ", ".join(f"{n} {len(splits[n])}" for n in SPLITS)
               + (f" ({len(quarantined)} quarantined files left out)" if quarantined else ""))


if __name__ == "__main__":
    main()
