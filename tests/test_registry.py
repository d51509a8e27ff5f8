"""Issue 39, items 1-3: the model registry (docs/registry.md).

One committed tiny run (the session's trained_project), a directory remote, two versions
registered with `python -m tools.registry register` (v0.1.0, then v0.2.0 after a param change
and a `dvc repro`), v0.2.0 assigned `prod` with GTO, everything pushed to a bare git repo on a
local path. A new machine is an empty folder: no clone, only `dvc artifacts get` or
`python -m tools.registry get` against the bare repo.
"""
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.conftest import ROOT, copy_run, run_module
from tests.test_remote import BUCKET
from tools.project import dvc, git, set_params

pytestmark = pytest.mark.e2e

NAME = "classification"
MODEL = "models/model.onnx"


def md5(path: Path) -> str:
    import hashlib

    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def lock_md5(repo: Path, rev: str, path: str = MODEL) -> str:
    """The md5 dvc.lock records for path at rev."""
    lock = yaml.safe_load(git(repo, "show", f"{rev}:dvc.lock"))
    return next(o["md5"] for s in lock["stages"].values() for o in s.get("outs", [])
                if o["path"] == path)


def registry(*args, cwd):
    return run_module("tools.registry", *args, cwd=cwd)


def gto(*args, cwd):
    return run_module("gto.cli", *args, cwd=cwd)


def commit_all(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)


@pytest.fixture(scope="module")
def released(trained_project, tmp_path_factory):
    """v0.1.0 (the tiny run) and v0.2.0 (train.lr 0.02, re-run), v0.2.0 at prod, pushed."""
    base = tmp_path_factory.mktemp("registry")
    repo = copy_run(trained_project, base / "project")
    (base / "store").mkdir()
    dvc(repo, "remote", "add", "-d", "store", str(base / "store"))
    commit_all(repo, "a directory remote")
    dvc(repo, "push", "-q")
    proc = registry("register", NAME, "v0.1.0", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"registered {NAME}@v0.1.0" in proc.stdout
    set_params(repo, {"train.lr": 0.02})
    dvc(repo, "repro")
    commit_all(repo, "train.lr 0.02")
    dvc(repo, "push", "-q")
    proc = registry("register", NAME, "v0.2.0", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = gto("assign", NAME, "--version", "v0.2.0", "--stage", "prod", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    git(base, "init", "-q", "--bare", "origin.git")
    git(repo, "push", "-q", str(base / "origin.git"), "HEAD", "--tags")
    v1, v2 = (git(repo, "rev-list", "-n1", f"{NAME}@{v}").strip() for v in ("v0.1.0", "v0.2.0"))
    assert lock_md5(repo, v1) != lock_md5(repo, v2)  # the two versions are different models
    return SimpleNamespace(repo=repo, origin=base / "origin.git", store=base / "store",
                           v1=v1, v2=v2)


@pytest.fixture(autouse=True, scope="module")
def no_analytics():
    """A new machine's empty folder has no DVC config: no analytics daemon from it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DVC_NO_ANALYTICS", "1")
        yield


def object_path(store: Path, digest: str) -> Path:
    return store / "files/md5" / digest[:2] / digest[2:]


def test_register_refuses_each_problem_in_one_line_naming_the_fix(trained_project, tmp_path):
    repo = copy_run(trained_project, tmp_path / "project")
    (repo / "notes.txt").write_text("not committed\n")
    (repo / "data/manifest.csv").unlink()  # an out (git-ignored): dvc status is not clean
    proc = registry("register", NAME, "v1.0.0", cwd=repo)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == f"Error: refusing to register {NAME} v1.0.0:"
    assert len(lines) == 4, lines
    assert "uncommitted changes in notes.txt: commit them" in lines[1]
    assert "dvc.lock does not match the outs of " in lines[2] and "ingest" in lines[2]
    assert "run `dvc repro` and commit dvc.lock" in lines[2]
    assert "no default DVC remote" in lines[3] and "dvc remote add -d" in lines[3]
    # the fixes, one at a time
    (repo / "notes.txt").unlink()
    dvc(repo, "checkout", "data/manifest.csv")
    (tmp_path / "store").mkdir()
    dvc(repo, "remote", "add", "-d", "store", str(tmp_path / "store"))
    commit_all(repo, "remote")
    proc = registry("register", NAME, "v1.0.0", cwd=repo)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and "not in the default remote 'store'" in lines[1], lines
    assert lines[1].endswith("run `dvc push` first")
    assert git(repo, "tag", "-l") == ""  # nothing registered while refusing
    proc = registry("register", "detector", "v1.0.0", cwd=repo)
    assert proc.returncode == 1 and "detector is not an artifact of dvc.yaml" in proc.stderr
    dvc(repo, "push", "-q")
    proc = registry("register", NAME, "v1.0.0", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert git(repo, "tag", "-l").split() == [f"{NAME}@v1.0.0"]
    proc = registry("register", NAME, "v1.0.0", cwd=repo)  # GTO's own refusal, passed on
    assert proc.returncode == 1 and "gto refused" in proc.stderr


def test_the_tag_message_holds_the_runs_facts(released):
    from tools.registry.message import parse

    repo = released.repo
    lock = yaml.safe_load(git(repo, "show", f"{released.v1}:dvc.lock"))
    outs = {o["path"]: o["md5"] for s in lock["stages"].values() for o in s.get("outs", [])}
    for version, extra in (("v0.1.0", {}), ("v0.2.0", {"train.lr": 0.02})):
        tag = f"{NAME}@{version}"
        assert git(repo, "cat-file", "-t", tag).strip() == "tag"  # annotated
        message = git(repo, "tag", "-l", "--format=%(contents)", tag)
        facts = parse(message)
        rev = git(repo, "rev-list", "-n1", tag).strip()
        metrics = json.loads(git(repo, "show", f"{rev}:metrics/eval.json"))
        assert facts["headline"] == f"accuracy {round(metrics['accuracy'], 6)}"
        assert facts["metrics"]["accuracy"] == round(metrics["accuracy"], 6)
        assert facts["kernels"] == "portable, 2 threads"
        # the tiny run's overrides of the classification recipe (tests/conftest.py TINY_RUN)
        assert facts["params"] == {"sample.per_class": 20, "train.epochs": 1, **extra}
        if version == "v0.1.0":
            assert facts["data"] == outs["data/manifest.csv"]
            assert facts["split"] == outs["data/split"]
    assert parse(git(repo, "tag", "-l", "--format=%(contents)", f"{NAME}@v0.2.0"))["data"] \
        == outs["data/manifest.csv"]  # a param change is not a new data version


def test_show_lists_every_version_with_stage_date_headline_and_data(released):
    proc = registry("show", "--json", cwd=released.repo)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(r["artifact"], r["version"], r["stages"], r["commit"]) for r in rows] == [
        (NAME, "v0.2.0", ["prod"], released.v2), (NAME, "v0.1.0", [], released.v1)]
    assert all(r["headline"].startswith("accuracy ") and len(r["data"]) == 32 and r["date"]
               for r in rows)
    table = registry("show", "--repo", str(released.origin), cwd=released.repo.parent)
    assert table.returncode == 0, table.stderr
    head, *lines = table.stdout.strip().splitlines()
    assert head.split() == ["artifact", "version", "stage", "date", "headline", "data",
                            "commit"]
    assert lines[0].split()[:3] == [NAME, "v0.2.0", "prod"] and rows[0]["data"][:12] in lines[0]
    assert lines[1].split()[:3] == [NAME, "v0.1.0", "-"]


def test_dvc_artifacts_get_works_in_a_fresh_clone_after_pull(released, tmp_path):
    git(tmp_path, "clone", "-q", str(released.origin), "clone")
    clone = tmp_path / "clone"
    dvc(clone, "pull", "-q")
    dvc(clone, "artifacts", "get", ".", NAME, "-o", str(tmp_path / "x.onnx"))
    assert md5(tmp_path / "x.onnx") == lock_md5(clone, "HEAD") == md5(clone / MODEL)


def test_a_new_machine_gets_the_exact_bytes_of_a_version_or_stage(released, tmp_path):
    """No clone: `dvc artifacts get` and `tools.registry get` against the bare repo write the
    bytes the tagged commit's dvc.lock records."""
    origin, repo = str(released.origin), released.repo
    dvc(tmp_path, "artifacts", "get", origin, NAME, "--rev", "v0.1.0", "-o", "v1.onnx")
    dvc(tmp_path, "artifacts", "get", origin, NAME, "--stage", "prod", "-o", "prod.onnx")
    assert md5(tmp_path / "v1.onnx") == lock_md5(repo, released.v1)
    assert md5(tmp_path / "prod.onnx") == lock_md5(repo, released.v2)
    proc = registry("get", origin, NAME, "--stage", "prod", "-o", "checked.onnx", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert md5(tmp_path / "checked.onnx") == lock_md5(repo, released.v2)
    assert f"md5 {lock_md5(repo, released.v2)} (checked)" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checked.onnx", "prod.onnx",
                                                          "v1.onnx"]
    proc = registry("get", origin, NAME, "--rev", "v9.0.0", cwd=tmp_path)
    assert proc.returncode == 1 and f"artifact {NAME}: version v9.0.0 not found" in proc.stderr


def test_a_missing_or_corrupt_object_is_an_error_naming_the_artifact(released, tmp_path):
    origin, want = str(released.origin), lock_md5(released.repo, released.v1)
    obj = object_path(released.store, want)
    good = obj.read_bytes()
    try:
        obj.chmod(0o644)
        flipped = bytearray(good)
        flipped[len(good) // 2] ^= 0x01
        obj.write_bytes(bytes(flipped))
        # why tools.registry get exists: DVC writes the corrupt bytes, with `verify` on too
        dvc(released.repo, "remote", "modify", "store", "verify", "true")
        commit_all(released.repo, "verify downloads")
        git(released.repo, "push", "-q", origin, "HEAD")
        dvc(tmp_path, "artifacts", "get", origin, NAME, "--rev", "v0.1.0", "-o", "dvc.onnx")
        assert md5(tmp_path / "dvc.onnx") != want
        proc = registry("get", origin, NAME, "--rev", "v0.1.0", "-o", "x.onnx", cwd=tmp_path)
        assert proc.returncode == 1
        assert f"artifact {NAME} v0.1.0: the remote's copy of {MODEL} has md5 " \
               f"{md5(obj)}" in proc.stderr and f"records {want}" in proc.stderr
        assert "corrupt" in proc.stderr
        obj.unlink()
        proc = dvc(tmp_path, "artifacts", "get", origin, NAME, "--rev", "v0.1.0", "-o",
                   "gone.onnx", check=False)
        assert proc.returncode != 0 and f"artifact '{NAME}'" in proc.stderr
        proc = registry("get", origin, NAME, "--rev", "v0.1.0", "-o", "x.onnx", cwd=tmp_path)
        assert proc.returncode == 1
        assert f"artifact {NAME} v0.1.0: {MODEL} (md5 {want}" in proc.stderr
        assert "is not in the DVC remote" in proc.stderr
        assert sorted(os.listdir(tmp_path)) == ["dvc.onnx"]  # nothing written, no temp left
    finally:
        obj.parent.mkdir(parents=True, exist_ok=True)
        obj.write_bytes(good)


# --- S3 (moto's server on loopback) ---------------------------------------------------------

@pytest.fixture(scope="module")
def s3_released(released, tmp_path_factory):
    """The same project with an S3 default remote (credentials only in the environment),
    pushed, v0.3.0 registered, in a second bare repo."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    base = tmp_path_factory.mktemp("registry-s3")
    with pytest.MonkeyPatch.context() as mp:
        for var, value in (("AWS_ACCESS_KEY_ID", "testing-key"),
                           ("AWS_SECRET_ACCESS_KEY", "testing-secret"),
                           ("AWS_DEFAULT_REGION", "us-east-1"),
                           ("AWS_EC2_METADATA_DISABLED", "true")):
            mp.setenv(var, value)
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket=BUCKET)
        repo = copy_run(released.repo, base / "project")
        dvc(repo, "remote", "add", "-d", "-f", "s3", f"s3://{BUCKET}/store")
        dvc(repo, "remote", "modify", "s3", "endpointurl", endpoint)
        commit_all(repo, "an S3 remote")
        dvc(repo, "push", "-q")
        proc = registry("register", NAME, "v0.3.0", cwd=repo)
        assert proc.returncode == 0, proc.stderr
        git(base, "init", "-q", "--bare", "origin.git")
        git(repo, "push", "-q", str(base / "origin.git"), "HEAD", "--tags")
        yield SimpleNamespace(repo=repo, origin=base / "origin.git", client=client)
    server.stop()


def test_s3_a_new_machine_gets_the_bytes_and_a_bad_object_is_refused(s3_released, tmp_path):
    origin, repo = str(s3_released.origin), s3_released.repo
    want = lock_md5(repo, "HEAD")
    dvc(tmp_path, "artifacts", "get", origin, NAME, "--rev", "v0.3.0", "-o", "dvc.onnx")
    assert md5(tmp_path / "dvc.onnx") == want
    proc = registry("get", origin, NAME, "--rev", "v0.3.0", "-o", "ok.onnx", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert md5(tmp_path / "ok.onnx") == want
    client, key = s3_released.client, f"store/files/md5/{want[:2]}/{want[2:]}"
    good = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    flipped = bytearray(good)
    flipped[7] ^= 0x80
    client.put_object(Bucket=BUCKET, Key=key, Body=bytes(flipped))
    proc = registry("get", origin, NAME, "--rev", "v0.3.0", "-o", "bad.onnx", cwd=tmp_path)
    assert proc.returncode == 1 and "corrupt" in proc.stderr and want in proc.stderr
    assert f"artifact {NAME} v0.3.0" in proc.stderr
    client.delete_object(Bucket=BUCKET, Key=key)
    proc = registry("get", origin, NAME, "--rev", "v0.3.0", "-o", "bad.onnx", cwd=tmp_path)
    assert proc.returncode == 1 and "is not in the DVC remote" in proc.stderr
    assert f"artifact {NAME} v0.3.0" in proc.stderr
    assert not (tmp_path / "bad.onnx").exists()
    client.put_object(Bucket=BUCKET, Key=key, Body=good)


def test_the_registry_page_runs_as_printed(trained_project, tmp_path):
    """docs/registry.md's blocks alone, as the docs test runs them (test_firsthour_readme.py):
    a committed run with a directory remote and a bare `team` repo, then register, assign, show,
    push the tags, and machine C's three fetches: the same bytes as dvc.lock's."""
    from tests.test_firsthour_readme import blocks, run_on_a_page, run_scenario

    project = copy_run(trained_project, tmp_path / "project")
    (tmp_path / "dvc-store").mkdir()
    dvc(project, "remote", "add", "-d", "shared", str(tmp_path / "dvc-store"))
    commit_all(project, "directory remote")
    git(tmp_path, "init", "-q", "--bare", "team.git")
    git(project, "remote", "add", "team", str(tmp_path / "team.git"))
    git(project, "push", "-q", "team", "HEAD")
    selected = blocks((ROOT / "docs/registry.md").read_text(), "docs/registry.md")
    output = run_scenario(project, tmp_path, selected, "registry", run_on_a_page(selected))
    assert output.rstrip().endswith("@@ all done")
    assert "registered classification@v1.0.0" in output
    machine = tmp_path / "machine-C"
    want = lock_md5(project, "HEAD")
    for name in ("model.onnx", "model-v1.0.0.onnx", "checked.onnx"):
        assert md5(machine / name) == want, name
    # predict by name (item 4): the page's runs name the version that wrote each row
    rows = [json.loads(line) for line in (project / "prod.jsonl").read_text().splitlines()]
    assert rows and {(r["artifact"], r["artifact_version"], r["stage"]) for r in rows} == {
        (NAME, "v1.0.0", "prod")}
    assert "@@ run docs/registry.md" in output and "--registry" in output
