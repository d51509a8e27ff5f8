"""The archive tells the truth, as a user meets it: after an edit to code a task's training
runs, `dvc status` names train stale for that task and a resumed run refuses the old checkpoint
because the code changed; after an edit to a report section, train stays up to date.

Each case edits a copy of the task's shared tiny run (one `dvc repro`, committed) and asks DVC
and the checkpoint's resume decision (stages.lib.train.checkpoint.resumable, with the train
stage's own fingerprint); nothing is trained again."""
import json
import subprocess
import sys

import pytest

from tests.conftest import copy_run

# train's resume decision in the project copy, as stages.train takes it (the checkpoint's own
# thread count: the effective one the run had)
RESUME = """
from stages.lib.train import checkpoint as ck
from stages.tasks import open_stage
task, params, _ = open_stage("train")
saved = ck.load(ck.LAST)[0]["fingerprint"]
print(ck.resumable(ck.LAST, ck.run_fingerprint(params["train"], task,
                                               {"threads": saved["params"]["threads"]}))[1])
"""

EDITS = {  # each task's shared run: [(edited file, whether train must go stale)]
    "trained_project": [("stages/lib/train/ema.py", True),  # the weight average
                        ("stages/lib/params.py", True),  # the knobs' defaults and parsing
                        ("stages/report/tasks/classification.py", False)],  # a report section
    "ocr_project": [("stages/lib/train/ema.py", True),
                    ("stages/tasks/common/ctc.py", True)],  # the CTC loss
    "audio_project": [("stages/tasks/common/singlelabel/__init__.py", True)],  # its loss
    "speech_project": [("stages/tasks/common/ctc.py", True),
                       ("stages/lib/modality/audiocore.py", True),  # the log-mel features
                       ("stages/report/sections.py", False)],
}


def status(project) -> dict:
    proc = subprocess.run(["dvc", "status", "--json"], cwd=project, capture_output=True,
                          text=True, check=True)
    return json.loads(proc.stdout or "{}")


def changed_deps(entries) -> dict:
    return {k: v for e in entries if isinstance(e, dict) for k, v in
            e.get("changed deps", {}).items()}


def resume_message(project) -> str:
    return subprocess.run([sys.executable, "-c", RESUME], cwd=project, capture_output=True,
                          text=True, check=True).stdout.strip()


@pytest.mark.e2e
@pytest.mark.parametrize("run", sorted(EDITS))
def test_an_edit_makes_train_stale_exactly_when_train_runs_it(request, tmp_path, run):
    """One copy of the run per task; each edit is checked alone, then undone."""
    project = copy_run(request.getfixturevalue(run), tmp_path / "project")
    assert "train" not in status(project)
    assert resume_message(project).startswith("resuming from")  # the control: it matches
    for edited, stale in EDITS[run]:
        path = project / edited
        original = path.read_bytes()
        path.write_bytes(original + b"# an edit\n")
        found = status(project)
        if stale:
            changed = changed_deps(found.get("train", []))
            assert [d for d in changed if edited == d or edited.startswith(d + "/")], \
                (edited, found)
            message = resume_message(project)
            assert "starting fresh" in message and "the training code changed" in message, \
                (edited, message)
        else:
            assert "train" not in found and "report" in found, (edited, found)
            assert resume_message(project).startswith("resuming from"), edited
        path.write_bytes(original)
