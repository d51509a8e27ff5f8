"""Assign every file to train, val or test by its content hash: a split that never drifts.

A file's split is a pure function of (its sha256, split.seed): adding images never moves an
existing one, so the test set stays fixed as data grows, and identical copies of a file always
land together. Files are listed, never moved.
"""
import hashlib
from collections import Counter
from pathlib import Path

import click

from stages.lib.io import StageError, read_csv, write_csv, write_json
from stages.lib.params import load, params_option

MANIFEST = Path("data/manifest.csv")
OUT_DIR = Path("data/split")
METRICS = Path("metrics/split.json")
SPLITS = ("train", "val", "test")
FIELDS = ["path", "label", "sha256"]


def assign(sha256: str, seed: int, val: float, test: float) -> str:
    """Map a content hash to a split; uniform in [0, 1) and stable for a given seed."""
    u = int(hashlib.sha256(f"{seed}:{sha256}".encode()).hexdigest()[:15], 16) / 16**15
    return "test" if u < test else "val" if u < test + val else "train"


def split_rows(rows, seed, val, test) -> dict[str, list[dict]]:
    out = {name: [] for name in SPLITS}
    for r in sorted(rows, key=lambda r: r["path"]):
        out[assign(r["sha256"], seed, val, test)].append({k: r[k] for k in FIELDS})
    return out


@click.command()
@params_option
def main(params_path):
    """Write data/split/{train,val,test}.csv and metrics/split.json from the manifest.

    Reads `split.seed`, `split.val` and `split.test` (fractions) from the params file.
    """
    p = load("split", params_path)
    if not (0 < p.val and 0 < p.test and p.val + p.test < 1):
        raise StageError("split.val and split.test must be > 0 with split.val + split.test < 1.")
    rows = [r for r in read_csv(MANIFEST) if not r["error"]]
    splits = split_rows(rows, p.seed, p.val, p.test)
    for name, part in splits.items():
        if not part:
            raise StageError(f"split: the {name} split is empty; add data or raise split.{name}.")
        write_csv(OUT_DIR / f"{name}.csv", part, FIELDS)
    counts = {name: dict(sorted(Counter(r["label"] for r in part).items()))
              for name, part in splits.items()}
    write_json(METRICS, counts)
    click.echo("split: " + ", ".join(f"{n} {len(splits[n])}" for n in SPLITS))


if __name__ == "__main__":
    main()
