"""The data gate: stop the pipeline before training when any file is unusable, naming each one.

Every problem is collected first, then all are reported together; metrics/validation.json
counts them so `dvc metrics diff` shows data quality changing between data versions.
"""
from collections import Counter
from pathlib import Path

import click

from stages.lib.io import StageError, read_csv, write_json
from stages.lib.params import load, params_option

MANIFEST = Path("data/manifest.csv")
METRICS = Path("metrics/validation.json")


def find_problems(rows, min_side: int) -> list[tuple[str, str]]:
    """(path, reason) for every file that must not reach training, sorted by path."""
    problems = []
    for r in rows:
        if r["error"]:
            problems.append((r["path"], r["error"]))
        elif min(int(r["width"]), int(r["height"])) < min_side:
            problems.append((r["path"], f"too small: {r['width']}x{r['height']} "
                                        f"(validate.min_side is {min_side})"))
    return sorted(problems)


def summarize(rows, problems) -> dict:
    bad = {path for path, _ in problems}
    per_class = Counter(r["label"] for r in rows if r["path"] not in bad)
    return {
        "files": len(rows),
        "valid": len(rows) - len(bad),
        "invalid": len(bad),
        "classes": len(per_class),
        "per_class": dict(sorted(per_class.items())),
    }


@click.command()
@params_option
def main(params_path):
    """Check data/manifest.csv and fail, naming every bad file, if any cannot be used.

    Reads `validate.min_side` from the params file; writes metrics/validation.json.
    """
    p = load("validate", params_path)
    rows = read_csv(MANIFEST)
    problems = find_problems(rows, p.min_side)
    write_json(METRICS, summarize(rows, problems))
    if problems:
        lines = "\n".join(f"  {path}: {reason}" for path, reason in problems)
        raise StageError(
            f"validate: {len(problems)} of {len(rows)} files cannot be used:\n{lines}\n"
            f"Fix or remove these files under data.source, then run `dvc repro` again."
        )
    click.echo(f"validate: all {len(rows)} files are usable")


if __name__ == "__main__":
    main()
