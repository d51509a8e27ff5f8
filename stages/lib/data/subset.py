"""A small seeded subset of a dataset in its own layout, for tools.smoke (write_subset): N files
per group (the task's `subset_group`: classification's classes; one group of files for tasks
without classes), chosen by a hash of (seed, path) so the same data and seed give the same
subset. The dataset is only read; the subset is written elsewhere."""
import hashlib
import shutil
from collections import defaultdict
from pathlib import Path

from stages.lib.userfiles import outside


def rank(seed: int, path: str) -> str:
    return hashlib.sha256(f"{seed}:{path}".encode()).hexdigest()


def choose(task, annotations, listing, per_group: int, seed: int) -> list[str]:
    """The chosen files: per group, the per_group files of lowest rank(seed, path)."""
    groups = defaultdict(list)
    for rel, kind, _ in listing:
        if kind == "file" and rel not in annotations.skip:
            groups[task.subset_group(annotations.values.get(rel, {}))].append(rel)
    return sorted(rel for files in groups.values()
                  for rel in sorted(files, key=lambda r: rank(seed, r))[:per_group])


def copy_annotations(source: Path, dest: Path, annotations, chosen: set) -> None:
    """Task.subset_annotations' default: per-image annotation files (same stem as an image)
    follow their image; the others are copied whole."""
    stems = defaultdict(set)  # stem -> images of that stem
    for rel in annotations.values:
        stems[Path(rel).stem].add(rel)
    for rel in sorted(annotations.skip):
        images = stems.get(Path(rel).stem)
        if images and not images & chosen:
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        # a link out of the source stays a link: the subset's ingest refuses it as the
        # source's does, and its target's bytes are never copied in
        shutil.copy2(source / rel, dest / rel, follow_symlinks=not outside(source, source / rel))
