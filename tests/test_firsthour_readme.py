"""Issues 17 and 29, acceptance: every command in the README and the docs runs as printed.

Every ```bash / ```sh / ```console block of README.md and of every docs/*.md page is cut into
commands (a line plus its `\\` continuations; comments dropped; in a console block only the
`$ ` lines). Each command is run, as printed, in a copy of the session's tiny trained project,
unless SKIP below names it with the reason. What the pages leave to the reader (the files a user
has, a URL, the prose's "then `dvc push`") is declared in PLACEHOLDERS and SETUP, run before the
command they serve. A command fails the test when it exits non-zero, unless EXPECTED_FAIL names
it; the failure names the file and line, the command and the tail of its output.

How the blocks run, as a user would type them:
- one shell per scenario (below), the blocks in order, so `cd` and files carry over; the pages
  in the order of ORDER, then the other docs pages by name, then the README (its everyday
  commands need the remote the machines page sets up);
- a README command printed exactly as a docs page prints it (comments aside) runs once, on the
  page: the README's everyday commands summarise the pages;
- a block that starts with `git clone` is another machine: it starts in a fresh directory;
- a comment `# machine B` moves to machine B's fresh directory (`# machine A` is the project);
- HOME is a temp directory holding the user's files (`~/Downloads/...`, `~/new_images`).
"""
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, copy_run

README = "README.md"
# The workspace scenario runs these pages first, in this order: fine-tuning from weights, the
# experiments page, experiments and what to commit, predict, then the remotes and the clones
# (which need everything before committed and pushed). The other pages follow by name.
ORDER = ("docs/fine-tuning.md", "docs/report.md", "docs/experiments.md", "docs/predict-serve.md",
         "docs/machines.md")
FENCE = re.compile(r"^```(\w*)\s*$")
SHELLS = {"bash", "sh", "shell", "console"}

# Commands not run (regex searched in the command), each with the reason and what runs it.
SKIP = {
    r"^python3\.11 -m venv \.venv .*&& dvc repro$":
        "installs from the package index (network); .ci/run runs it in a fresh clone and "
        "tests/test_default_pipeline.py the dvc repro",
    r"^python3\.11 -m venv \.venv .*&& python -m pytest$":
        "installs from the package index and runs the whole suite (this test included); "
        ".ci/run runs it",
    r"--score-threshold":
        "needs a detection model (task: detection); tests/test_detection_e2e.py runs it",
    r"weights/det_v1\.pt":
        "fine-tunes a detection model (task: detection; resnet18 has no stem or c2 to freeze); "
        "tests/test_finetune_tasks_e2e.py runs init_from, freeze, compare_with and LoRA per task",
    r"--beam":
        "needs a text-recognition model (task: ocr); tests/test_ocr_beam_e2e.py runs predict "
        "and serve with --beam",
    r"^python -m tools\.serve":
        "a server that runs until stopped; tests/test_serve.py and test_firsthour_serve.py "
        "start it and query it",
    r"^curl ":
        "asks the server the skipped `python -m tools.serve` starts; "
        "tests/test_serve_registry.py sends the same requests to a real server",
    r"^python -c \"from tools\.project import copy_project":
        "builds a full-size project of another task under /tmp (minutes to an hour of "
        "training); tests/test_detection_e2e.py, test_segmentation_e2e.py and test_ocr_e2e.py "
        "run each task's pipeline on a tiny sample",
    r"^cd /tmp/(det|seg|ocr) &&":
        "runs the full-size project the skipped copy_project command makes",
    r"^python -m tools\.init --task (detection|segmentation|ocr|audio|speech)":
        "switches the workspace to another task's full-size sample (minutes of training); "
        "tests/test_init_e2e.py runs init and dvc repro per task on tiny data",
    r"^apt-get install ":
        "installs Debian packages (root and the network); .ci/run installs the same, at pinned "
        "versions, before the suite",
    r"^python -m pytest":
        "the test suite itself (this test included); .ci/run runs it whole",
    r"^git clone <repo>|^python -m venv \.venv|^dvc pull data/processed":
        "each machine's set-up for multi-node training: a network install; "
        "tests/test_train_resume.py and tests/test_cores.py run the several-machine cases",
    r"# on node0|# on every other machine":
        "multi-node torchrun, one command per machine; tests/test_train_resume.py runs it",
    r"--backend openvino|model\.int8\.onnx":
        "needs export.formats with openvino and int8 (not the default); "
        "tests/test_export_formats.py runs these predictions",
    r"bash bench/gpu_check\.sh":
        "needs a CUDA GPU (and its wheels); tests/test_export_formats.py runs it without one "
        "(every row skipped, exit 2)",
    r"^python -m bench\.gpu_wheels":
        "downloads wheels from the package index (network); tests/test_gpu_wheels.py checks "
        "which packages it takes",
    r"^python -m bench\.":
        "benchmarks: minutes of training on full-size data",
    r"^python -m tools\.predict clips/":
        "needs an audio model (task: audio) and clips; tests/test_audio_e2e.py runs predict on "
        "a folder of clips with a truncated and a text file among them",
    r"^python -m tools\.smoke":
        "a whole pipeline run in a temp copy (about 30 s each); tests/test_firsthour_smoke.py "
        "and tests/test_default_pipeline.py run both forms",
    r"^python -m tools\.verify":
        "re-runs the whole pipeline in a clean clone; tests/test_verify.py and "
        "tests/test_firsthour_verify.py run it (--rev with an older commit included)",
    r"^ray start |--ray":
        "Ray nodes on several machines, and predict on them; tests/test_predict_ray.py runs "
        "predict --ray on a two-node cluster on 127.0.0.1",
    r"pipelines/":
        "pipelines of other tasks in the repository (minutes of training each); "
        "tests/test_pipelines.py runs init --into, dvc repro, dvc exp run in a folder, register, "
        "assign and dvc artifacts get of pipelines/ocr:ocr on tiny recipes",
    r"data/digits|digits v2\.0\.0|digits@":
        "a dataset repository and a project importing it; tests/test_data_versions.py runs "
        "dvc add, register, dvc import --rev, dvc update --rev and the repro that names changes",
    r"^python3\.11 -m venv /tmp/lock-env":
        "installs from the package index (network) to regenerate requirements.lock",
}

# Commands expected to exit non-zero (regex: why). None of the documented commands is, today.
EXPECTED_FAIL: dict[str, str] = {}

# Placeholders the pages leave to the reader, and what stands for them here.
PLACEHOLDERS = {
    r"/mnt/shared/dvc-store": "$README_TMP/dvc-store",  # a shared disk
    r"\bURL\b": "$README_TMP/team.git",  # the team's git server
    r"\bmy-exp\b": "$MY_EXP",  # the name of one of your experiments
}

# Files and steps the pages assume, run before the first command (of any page) matching the
# regex.
SETUP = {
    r"^cp ~/Downloads/resnet18\.pth":
        # weights you downloaded: a torchvision resnet18 state dict (seeded, nothing downloaded)
        f"{sys.executable} -m tests.test_firsthour_readme resnet18",
    r"^python -m tools\.predict photos/":
        # your photos: a folder, loose PNGs, a list file and one JPEG (digits of the sample)
        f"{sys.executable} -m tests.test_firsthour_readme photos",
    r"^dvc add data/raw && git add":
        # your own data: 3 classes of 48x48 RGB (tests/owndata.py), without its corrupt file
        f"{sys.executable} -m tests.test_firsthour_readme own_data",
    r"^cp -r ~/new_images/\*":
        # 20% more images of your classes
        f"{sys.executable} -m tests.test_firsthour_readme new_images",
    r"^git clone URL image-pipeline && cd image-pipeline$":
        # the prose before the block: the repository is at URL, and `dvc push` after a run
        'if [ ! -d "$README_TMP/team.git" ]; then '
        'git -C "$PROJECT" init -q --bare --initial-branch="$(git -C "$PROJECT" branch '
        '--show-current)" "$README_TMP/team.git" && git -C "$PROJECT" push -q '
        '"$README_TMP/team.git" HEAD && (cd "$PROJECT" && dvc push -q); fi',
    r"^python -m tools\.registry register":
        # the prose: a version is a committed run (register refuses uncommitted changes)
        'git add -A && { git diff --cached --quiet || git commit -qm "the run to register"; }',
    r"^git remote add team URL":
        # my-exp: the experiment made by the Experiments section (`dvc exp run -S train.lr=..`)
        'MY_EXP=$(dvc exp ls -A --name-only | grep -v "^$" | head -n 1) && '
        'test -n "$MY_EXP"',
}

# Which blocks run in which project, in which order (by a regex of the block's first command).
# "workspace": a copy of the trained project, every page's blocks in order. "own data": a copy
# where the own-data page's block runs first, then the grown-data block that builds on it.
OWN_DATA_BLOCKS = (r"^dvc add data/raw && git add", r"^cp models/model\.pt weights/v1\.pt")


@dataclass
class Command:
    file: str  # the page, relative to the project: README.md, docs/training.md
    line: int  # 1-based line in it
    text: str
    comment_before: str = ""  # the comment line(s) just before it, in the same block

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Block:
    file: str
    line: int
    commands: list


def documents() -> list[str]:
    """The pages whose commands run, in the workspace scenario's order."""
    docs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    return [d for d in ORDER if d in docs] + [d for d in docs if d not in ORDER] + [README]


def blocks(text: str, file: str = README) -> list[Block]:
    """A page's shell blocks, each cut into commands."""
    out, current, lang, pending = [], None, None, ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m and current is None and lang is None:
            lang = m.group(1)
            if lang in SHELLS:
                current = Block(file, i + 1, [])
            i += 1
            continue
        if m and (lang is not None):
            if current is not None:
                out.append(current)
            current, lang, pending = None, None, ""
            i += 1
            continue
        if current is not None:
            raw = lines[i]
            start = i + 1
            if lang == "console":
                if not raw.startswith("$ "):
                    i += 1
                    continue
                raw = raw[2:]
            stripped = raw.strip()
            if stripped.startswith("#") or not stripped:
                pending = stripped if stripped.startswith("#") else ""
                i += 1
                continue
            while raw.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                raw = raw.rstrip()[:-1].rstrip() + " " + lines[i].strip()
            current.commands.append(Command(file, start, raw.strip(), pending))
            pending = ""
        i += 1
    return out


def bare(command: str) -> str:
    """The command without its trailing `# comment` (outside quotes)."""
    quote, out = None, []
    for ch in command:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (not out or out[-1].isspace()):
            break
        out.append(ch)
    return "".join(out).rstrip()


def reason_to_skip(command: str) -> str | None:
    for pattern, why in SKIP.items():
        if re.search(pattern, command):
            return why
    return None


def expected_to_fail(command: str) -> bool:
    return any(re.search(p, command) for p in EXPECTED_FAIL)


def substitute(command: str) -> str:
    for pattern, value in PLACEHOLDERS.items():
        command = re.sub(pattern, lambda _m, v=value: v, command)
    return command


def run_on_a_page(every: list[Block]) -> dict[str, str]:
    """Each docs page's command that runs, by its text without comments: where it runs."""
    return {bare(c.text): c.where for b in every if b.file != README for c in b.commands
            if not reason_to_skip(c.text)}


def reason_not_run(c: Command, on_pages: dict[str, str]) -> str | None:
    why = reason_to_skip(c.text)
    if not why and c.file == README and bare(c.text) in on_pages:
        why = f"runs as printed at {on_pages[bare(c.text)]}"
    return why


def script(selected: list[Block], on_pages: dict[str, str]) -> str:
    """One bash script for these blocks: each command announced, run, its exit status
    checked; a failure (or an unexpected success) ends the script naming the file and line."""
    parts = ["set -o pipefail", 'cd "$PROJECT"']
    setup_done = set()
    for block in selected:
        first = block.commands[0].text
        if first.startswith("git clone"):
            machine = f"machine-{re.sub(r'[^A-Za-z0-9]+', '-', block.file)}-{block.line}"
            parts.append(f'mkdir -p "$README_TMP/{machine}" && cd "$README_TMP/{machine}"')
        else:
            parts.append('cd "$PROJECT"')
        for c in block.commands:
            machine = re.match(r"#\s*machine\s+(\w+)", c.comment_before, re.I)
            if machine:
                name = machine.group(1)
                parts.append('cd "$PROJECT"' if name.upper() == "A" else
                             f'mkdir -p "$README_TMP/machine-{name}" && '
                             f'cd "$README_TMP/machine-{name}"')
            why = reason_not_run(c, on_pages)
            if why:
                parts.append(f"echo {shlex.quote(f'@@ skip {c.where}: {why}')}")
                continue
            for pattern, setup in SETUP.items():
                if pattern not in setup_done and re.search(pattern, c.text):
                    setup_done.add(pattern)
                    parts.append(f"echo '@@ setup before {c.where}'")
                    parts.append(f"{{ {setup} ; }} || {{ echo '@@ FAILED setup {c.where}'; "
                                 "exit 96; }")
            line = shlex.quote(f"@@ run {c.where}: {c.text}")
            parts.append(f"echo {line}")
            parts.append(substitute(bare(c.text)))
            if expected_to_fail(c.text):
                parts.append(f"if [ $? -eq 0 ]; then echo '@@ UNEXPECTED SUCCESS {c.where}'; "
                             "exit 98; fi")
            else:
                parts.append(f"rc=$?; if [ $rc -ne 0 ]; then echo \"@@ FAILED {c.where} "
                             "exit $rc\"; exit 97; fi")
    parts.append("echo '@@ all done'")
    return "\n".join(parts) + "\n"


def run_scenario(project: Path, tmp: Path, selected: list[Block], name: str,
                 on_pages: dict[str, str]) -> str:
    home = tmp / "home"
    home.mkdir(parents=True, exist_ok=True)
    text = script(selected, on_pages)
    (tmp / f"{name}.sh").write_text(text)
    env = {**os.environ, "HOME": str(home), "PROJECT": str(project), "README_TMP": str(tmp),
           "PYTHONPATH": str(ROOT), "GIT_AUTHOR_NAME": "user", "GIT_AUTHOR_EMAIL": "user@localhost",
           "GIT_COMMITTER_NAME": "user", "GIT_COMMITTER_EMAIL": "user@localhost",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    log = tmp / f"{name}.log"
    with log.open("w") as out:
        proc = subprocess.run(["bash", str(tmp / f"{name}.sh")], cwd=project, env=env,
                              stdout=out, stderr=subprocess.STDOUT, timeout=900)
    output = log.read_text()
    if proc.returncode != 0:
        failed = [ln for ln in output.splitlines() if ln.startswith("@@ FAILED")
                  or ln.startswith("@@ UNEXPECTED")]
        at = re.search(r"(\S+):(\d+)", failed[-1]) if failed else None
        where = f"{at.group(1)}:{at.group(2)}" if at else "?"
        command = next((c.text for b in selected for c in b.commands if c.where == where), "?")
        pytest.fail(f"{where.replace(':', ' line ')}: `{command}` "
                    f"({failed[-1] if failed else f'exit {proc.returncode}'}); output:\n"
                    + output[-4000:], pytrace=False)
    return output


def all_blocks() -> list[Block]:
    """Every page's blocks, the pages in documents() order."""
    return [b for doc in documents() for b in blocks((ROOT / doc).read_text(), doc)]


def split_scenarios(every: list[Block]) -> tuple[list[Block], list[Block]]:
    own = [next(b for b in every if re.search(p, b.commands[0].text)) for p in OWN_DATA_BLOCKS]
    return [b for b in every if b not in own], own


def test_every_command_is_parsed_and_every_table_entry_is_used():
    every = all_blocks()
    commands = [c.text for b in every for c in b.commands]
    assert len(every) >= 20 and all(b.commands for b in every)
    # every shell block of every page is read: the README and each docs page
    pages = documents()
    assert pages[-1] == README and len(pages) == 1 + len(list((ROOT / "docs").glob("*.md")))
    assert all(doc in pages for doc in ORDER), "ORDER names a page that does not exist"
    for doc in pages:
        fences = [m.group(1) for m in map(FENCE.match, (ROOT / doc).read_text().splitlines())
                  if m]
        opened = fences[::2]  # a fence opens, the next one closes
        assert len(fences) % 2 == 0, f"{doc}: a code block is not closed"
        assert sum(lang in SHELLS for lang in opened) == sum(b.file == doc for b in every), doc
    for table in (SKIP, SETUP, PLACEHOLDERS, EXPECTED_FAIL):
        for pattern in table:
            assert any(re.search(pattern, c) for c in commands), f"stale entry: {pattern}"
    for pattern in OWN_DATA_BLOCKS:
        assert sum(bool(re.search(pattern, b.commands[0].text)) for b in every) == 1, pattern
    ran = [c for c in commands if not reason_to_skip(c)]
    assert len(ran) > len(commands) / 2, "most documented commands run"


def test_a_failing_command_is_named_by_its_page_and_line(tmp_path):
    """The scenario's script stops at the first failing command and the test names its page,
    its line and the command; a README command a page prints too is not run twice."""
    page = "```bash\ntrue                 # fine\nfalse                # fails\necho never\n```\n"
    readme = "```bash\ntrue                 # as on the page\n```\n"
    selected = blocks(page, "docs/page.md") + blocks(readme, README)
    on_pages = run_on_a_page(selected)
    assert on_pages == {"true": "docs/page.md:2", "false": "docs/page.md:3",
                        "echo never": "docs/page.md:4"}
    assert "runs as printed at docs/page.md:2" in script(selected, on_pages)
    (tmp_path / "project").mkdir()
    with pytest.raises(pytest.fail.Exception) as failed:
        run_scenario(tmp_path / "project", tmp_path, selected, "page", on_pages)
    message = str(failed.value)
    assert message.startswith("docs/page.md line 3: `false                # fails`"), message
    assert "@@ FAILED docs/page.md:3 exit 1" in message and "never" not in message.split(
        "@@ run docs/page.md:3")[1]


@pytest.mark.e2e
def test_readme_commands_run_as_printed_in_the_trained_project(trained_project, tmp_path):
    """The workspace scenario: fine-tuning from weights, the experiments page, experiments and
    what to commit, predict, both remotes, a clone that pulls, an experiment that travels to a
    second machine, doctor."""
    every = all_blocks()
    workspace, _ = split_scenarios(every)
    project = copy_run(trained_project, tmp_path / "project")
    output = run_scenario(project, tmp_path, workspace, "workspace", run_on_a_page(every))
    assert output.rstrip().endswith("@@ all done")
    ran = [ln for ln in output.splitlines() if re.match(r"@@ run \S+:\d+", ln)]
    assert len(ran) >= 25, ran
    # what the comments promise: the clone that pulled has nothing to re-run
    assert "Data and pipelines are up to date" in output


@pytest.mark.e2e
def test_readme_own_data_commands_run_as_printed(trained_project, tmp_path):
    """The own-data section on a fresh folder of the user's (then its grown-data follow-up)."""
    every = all_blocks()
    _, own = split_scenarios(every)
    project = copy_run(trained_project, tmp_path / "project")
    output = run_scenario(project, tmp_path, own, "own", run_on_a_page(every))
    assert output.rstrip().endswith("@@ all done")
    assert "prepare.channels: 3 (" in output  # the own data was trained at its own settings
    assert "init: task classification on data/raw" in output
    compared = json.loads((project / "metrics/eval.json").read_text())
    assert "compare_with" in compared


def make_photos(root: Path) -> None:
    """photos/, more/*.png, list.txt and photo.jpg: the user's images, digits of the sample."""
    from PIL import Image

    sample = sorted(Path("data/sample").rglob("*.pgm"))[:8]
    for folder in ("photos", "more"):
        (root / folder).mkdir(exist_ok=True)
    for i, src in enumerate(sample[:4]):
        Image.open(src).save(root / "photos" / f"{i}.png")
    for i, src in enumerate(sample[4:6]):
        Image.open(src).save(root / "more" / f"{i}.png")
    Image.open(sample[6]).convert("RGB").save(root / "photo.jpg")
    Image.open(sample[7]).save(root / "listed.png")
    (root / "list.txt").write_text("listed.png\n")


def make_new_images(home: Path) -> None:
    """~/new_images/<class>/: 6 more images per class of the own data (20% more)."""
    import shutil
    import tempfile

    from tests.owndata import own_dataset

    with tempfile.TemporaryDirectory() as tmp:
        own_dataset(Path(tmp), per_class=36)
        for path in sorted(Path(tmp).rglob("*_03[0-5].*")):
            dest = home / "new_images" / path.parent.name / path.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)


def make_own_data(root: Path) -> None:
    from tests.owndata import own_dataset

    own_dataset(root / "data/raw")
    (root / "data/raw/blue/broken.png").unlink()


def make_resnet18(home: Path) -> None:
    import torch
    import torchvision

    torch.manual_seed(0)
    (home / "Downloads").mkdir(parents=True, exist_ok=True)
    torch.save(torchvision.models.resnet18().state_dict(), home / "Downloads/resnet18.pth")


if __name__ == "__main__":  # the SETUP helpers, run in the scenario's shell
    {"photos": lambda: make_photos(Path.cwd()),
     "own_data": lambda: make_own_data(Path.cwd()),
     "resnet18": lambda: make_resnet18(Path.home()),
     "new_images": lambda: make_new_images(Path.home())}[sys.argv[1]]()
