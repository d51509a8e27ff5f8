"""Issue 39, item 6: several pipelines in one repository (`tools.init --into`, docs/registry.md).

One repository with two pipelines made by `python -m tools.init --into`: detection and OCR on
tiny built-in samples, each run with `dvc repro pipelines/NAME/dvc.yaml`, committed. OCR is
registered v0.1.0, re-run by `dvc exp run` inside its folder with another learning rate,
registered v0.2.0 and assigned prod; a new machine (an empty folder, no clone) then fetches it
with `dvc artifacts get BARE_REPO pipelines/ocr:ocr --stage prod`.
"""
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.conftest import (DETECTION_TINY, OCR_TINY_RUN, ROOT, STAGES, built_once, copy_run,
                            detection_params, run_module)
from tests.test_predict_registry import FIELDS, predict, rows
from tests.test_registry import commit_all, gto, md5, registry
from tools.project import copy_project, dvc, git, set_params

pytestmark = pytest.mark.e2e

OCR = "pipelines/ocr:ocr"


def lock_outs(lock_text: str) -> dict:
    lock = yaml.safe_load(lock_text)
    return {o["path"]: o.get("md5") for s in lock["stages"].values() for o in s.get("outs", [])}


def build(folder: Path) -> Path:
    repo = copy_project(ROOT, folder / "project")
    for task, name in (("detection", "detection"), ("ocr", "ocr")):
        proc = run_module("tools.init", "--task", task, "--into", f"pipelines/{name}", cwd=repo)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"dvc.yaml: artifact pipelines/{name}:{name}" in proc.stdout
    set_params(repo / "pipelines/detection", detection_params(DETECTION_TINY))
    set_params(repo / "pipelines/ocr", OCR_TINY_RUN)
    commit_all(repo, "two pipelines")
    for name in ("ocr", "detection"):
        proc = dvc(repo, "repro", f"pipelines/{name}/dvc.yaml")
        ran = re.findall(r"Running stage 'pipelines/[a-z]+/dvc.yaml:([^']+)'", proc.stdout)
        assert sorted(ran) == sorted(STAGES), proc.stdout  # evaluate, export: either order
    commit_all(repo, "both pipelines run")
    return repo


@pytest.fixture(scope="module")
def two_pipelines(tmp_path_factory):
    return built_once(tmp_path_factory, "two-pipelines", build)


def test_init_into_makes_a_folder_of_its_own_and_leaves_the_root_alone(two_pipelines):
    repo = two_pipelines
    for rel in ("dvc.yaml", "params.yaml", "dvc.lock"):  # the root pipeline: unchanged
        assert (repo / rel).read_bytes() == (ROOT / rel).read_bytes(), rel
    folder = repo / "pipelines/ocr"
    for name in ("params.yaml", "dvc.yaml", "dvc.lock", "weights/none", ".gitignore"):
        assert (folder / name).is_file(), name
    for name in ("data", "models", "metrics", "plots", "reports"):
        assert (folder / name).is_dir(), name
    spec = yaml.safe_load((folder / "dvc.yaml").read_text())
    assert list(spec["stages"]) == STAGES
    assert spec["artifacts"] == {"ocr": {
        "type": "model", "path": "models/model.onnx", "labels": ["ocr"],
        "desc": "the ocr model exported to ONNX by the export stage, for predict and serve"}}
    train = spec["stages"]["train"]
    assert train["cmd"] == "PYTHONPATH=../.. python -m stages.train"
    assert "../../stages/train.py" in train["deps"] and "models/model.pt" in train["outs"]
    assert "../../requirements.lock" in spec["stages"]["report"]["deps"]
    assert yaml.safe_load((folder / "params.yaml").read_text())["task"] == "ocr"
    assert yaml.safe_load((repo / "pipelines/detection/params.yaml").read_text())["task"] == \
        "detection"
    assert git(repo, "status", "--porcelain") == ""  # logs/ and the outs are ignored
    lock = (folder / "dvc.lock").read_text()
    assert str(repo) not in lock and "/tmp" not in lock  # no absolute path in the lock


def test_a_pipeline_folder_writes_the_root_runs_bytes(two_pipelines, ocr_project):
    """The same params in pipelines/ocr/ and at the root: every out has the same md5."""
    ours = lock_outs((two_pipelines / "pipelines/ocr/dvc.lock").read_text())
    root = lock_outs((ocr_project / "dvc.lock").read_text())
    assert set(ours) == set(root)
    differ = {p for p in ours if ours[p] != root[p] and p != "models/checkpoints"}
    assert not differ, differ
    assert md5(two_pipelines / "pipelines/ocr/models/model.onnx") == md5(
        ocr_project / "models/model.onnx")


def test_metrics_and_experiments_at_the_root_show_every_pipeline(two_pipelines):
    shown = json.loads(dvc(two_pipelines, "metrics", "show", "--json").stdout)
    files = shown[""]["data"] if "" in shown else next(iter(shown.values()))["data"]
    assert {"pipelines/ocr/metrics/summary.json",
            "pipelines/detection/metrics/summary.json"} <= set(files)
    header = dvc(two_pipelines, "exp", "show", "--csv").stdout.splitlines()[0].split(",")
    assert "cer" in header and "map50" in header  # the OCR's and the detector's headlines


@pytest.fixture(scope="module")
def released(two_pipelines, tmp_path_factory):
    """OCR v0.1.0; v0.2.0 after `dvc exp run -S train.lr=0.01` in its folder; prod; pushed."""
    base = tmp_path_factory.mktemp("pipelines-registry")
    repo = copy_run(two_pipelines, base / "project")
    (base / "store").mkdir()
    dvc(repo, "remote", "add", "-d", "store", str(base / "store"))
    commit_all(repo, "a directory remote")
    dvc(repo, "push", "-q")
    proc = registry("register", OCR, "v0.1.0", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "registered pipelines/ocr=ocr@v0.1.0" in proc.stdout
    proc = dvc(repo / "pipelines/ocr", "exp", "run", "-S", "train.lr=0.01")
    ran = re.findall(r"Running stage '([^']+)'", proc.stdout)
    assert sorted(ran) == ["evaluate", "export", "report", "train"], proc.stdout  # this one only
    commit_all(repo, "ocr: train.lr 0.01")
    dvc(repo, "push", "-q")
    proc = registry("register", OCR, "v0.2.0", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = gto("assign", OCR, "--version", "v0.2.0", "--stage", "prod", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    git(base, "init", "-q", "--bare", "origin.git")
    git(repo, "push", "-q", str(base / "origin.git"), "HEAD", "--tags")
    return SimpleNamespace(repo=repo, origin=base / "origin.git", base=base)


def test_artifacts_get_by_stage_writes_the_registered_pipelines_model(released, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    repo = released.repo
    assert "pipelines/ocr=ocr@v0.2.0" in git(repo, "tag", "-l").split()
    v1, v2 = (lock_outs(git(repo, "show", f"pipelines/ocr=ocr@{v}:pipelines/ocr/dvc.lock"))
              ["models/model.onnx"] for v in ("v0.1.0", "v0.2.0"))
    assert v1 != v2  # the param change made another model
    machine = tmp_path / "machine-c"
    machine.mkdir()
    proc = dvc(machine, "artifacts", "get", str(released.origin), OCR, "--stage", "prod",
               "-o", "model.onnx", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert md5(machine / "model.onnx") == v2
    proc = registry("get", str(released.origin), OCR, "--rev", "v0.1.0", "-o", "v1.onnx",
                    cwd=machine)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert md5(machine / "v1.onnx") == v1
    # predict by the pipeline's name and stage writes the rows of the file fetched above
    images = sorted((repo / "pipelines/ocr/data/sample").rglob("*.pgm"))[:3]
    assert images
    cache = tmp_path / "cache"
    proc = predict(*images, "--model", f"{OCR}#prod", "--registry", released.origin,
                   "--out", "by-name.jsonl", cwd=machine, cache=cache)
    assert proc.returncode == 0, proc.stderr
    proc = predict(*images, "--model", "model.onnx", "--out", "by-file.jsonl", cwd=machine,
                   cache=cache)
    assert proc.returncode == 0, proc.stderr
    by_name, by_file = rows(machine / "by-name.jsonl"), rows(machine / "by-file.jsonl")
    assert [{k: v for k, v in r.items() if k not in FIELDS} for r in by_name] == by_file
    assert {(r["artifact_version"], r["stage"]) for r in by_name} == {("v0.2.0", "prod")}
    shown = json.loads(registry("show", "--repo", str(released.origin), "--json",
                                cwd=machine).stdout)
    assert [(r["artifact"], r["version"], r["stages"]) for r in shown] == [
        (OCR, "v0.2.0", ["prod"]), (OCR, "v0.1.0", [])]


def test_the_experiments_page_names_the_commits_registered_version_and_stage(released):
    """Item 8: git facts on the untracked experiments page; the DVC out run.html has none."""
    folder = released.repo / "pipelines/ocr"
    proc = run_module("stages.report", "--experiments", cwd=folder)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (folder / "reports/experiments.html").read_text()
    assert re.search(r'data-key="registry.pipelines/ocr:ocr">pipelines/ocr:ocr v0.2.0</code>'
                     r' <span class="badge ok">prod</span>', page), page
    assert "registry." not in (folder / "reports/run.html").read_text()
    assert git(released.repo, "status", "--porcelain") == ""  # the page is not tracked
