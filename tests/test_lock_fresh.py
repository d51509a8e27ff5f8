"""The committed dvc.lock was written by the code and params in the tree: no stage's tracked
dep (a stage's code, a helper package, params.yaml) has changed since. A stale lock otherwise
shows up only minutes later, in test_default_pipeline, as checkpoints whose code fingerprint
differs."""
import json

from tests.conftest import ROOT
from tools.project import dvc, git


def stale_deps(status: dict, tracked: set[str]) -> list[str]:
    """`dvc status --json` cut down to the changed deps that git tracks (code, params), as
    'stage: path' or 'stage: params.yaml key'. Deps that are another stage's outs (missing in a
    fresh clone, or rebuilt by a run) are left out: test_default_pipeline compares those."""
    found = []
    for stage, entries in sorted(status.items()):
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            for path, change in sorted(entry.get("changed deps", {}).items()):
                if isinstance(change, dict):  # params: {"train.epochs": "modified"}
                    found += [f"{stage}: {path} {key} {how}"
                              for key, how in sorted(change.items())]
                elif change == "modified" and (path in tracked or any(
                        t.startswith(path.rstrip("/") + "/") for t in tracked)):
                    found.append(f"{stage}: {path}")
    return found


def test_stale_deps_names_code_and_params_but_not_outs():
    status = {"ingest": [{"changed deps": {"stages/lib/modality": "modified",
                                           "data/sample": "deleted"}},
                         {"changed outs": {"data/manifest.csv": "not in cache"}}],
              "train": [{"changed deps": {"data/prepared": "modified",
                                          "params.yaml": {"train.epochs": "modified"}}}]}
    tracked = {"stages/lib/modality/audio.py", "params.yaml"}
    assert stale_deps(status, tracked) == ["ingest: stages/lib/modality",
                                           "train: params.yaml train.epochs modified"]


def test_committed_lock_matches_the_code_and_params_in_the_tree():
    status = json.loads(dvc(ROOT, "status", "--json").stdout or "{}")
    tracked = set(git(ROOT, "ls-files").splitlines())
    stale = stale_deps(status, tracked)
    assert not stale, ("dvc.lock is older than these deps; run `dvc repro` on the built-in "
                       "sample and commit dvc.lock:\n" + "\n".join(stale))
