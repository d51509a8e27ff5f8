"""Remotes and verify: a commit's data, model and experiments travel to a fresh clone, and
`verify` proves a clean clone reproduces them.

A real S3-protocol server (moto) listens on loopback; DVC talks to it through dvc-s3 exactly as
it would to AWS or MinIO. The tests run in file order and share one committed, pushed tiny run
(one `dvc repro` for the whole module).
"""
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import copy_run, run_tool
from tests.test_verify import rows, verify
from tools.project import dvc, git, lock_hashes, set_params
from tools.verify import DIFFERENT, IDENTICAL

pytestmark = pytest.mark.e2e

BUCKET = "dvc-store"
KEY, SECRET = "testing-key", "testing-secret"


def ran(proc) -> list[str]:
    return re.findall(r"Running stage '([^']+)'", proc.stdout)


def md5(path: Path) -> str:
    import hashlib

    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def s3():
    """An S3 server on a free loopback port with one bucket; creds only in the environment."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ACCESS_KEY_ID", KEY)
        mp.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
        yield endpoint
    server.stop()


@pytest.fixture(scope="module")
def pushed(s3, trained_project, tmp_path_factory):
    """A tiny pipeline run, committed, its S3 remote committed, pushed; a bare git origin."""
    base = tmp_path_factory.mktemp("remote")
    repo = copy_run(trained_project, base / "project")
    dvc(repo, "remote", "add", "-d", "s3", f"s3://{BUCKET}/store")
    dvc(repo, "remote", "modify", "s3", "endpointurl", s3)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tiny run, S3 remote")
    dvc(repo, "push")
    git(base, "init", "-q", "--bare", "origin.git")
    git(repo, "remote", "add", "origin", str(base / "origin.git"))
    git(repo, "push", "-q", "origin", "HEAD")
    return repo


def fresh_clone(source, dest, monkeypatch) -> Path:
    """git clone, then credentials via `dvc remote modify --local` (never in git)."""
    git(Path(dest).parent, "clone", "-q", str(source), Path(dest).name)
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    dvc(dest, "remote", "modify", "--local", "s3", "access_key_id", KEY)
    dvc(dest, "remote", "modify", "--local", "s3", "secret_access_key", SECRET)
    assert KEY not in (Path(dest) / ".dvc/config").read_text()
    return Path(dest)


def predict_matches_evaluate(root: Path) -> int:
    """Run the predict tool on the pulled test split; its labels must equal evaluate's."""
    from stages.lib.io import read_csv

    source = yaml.safe_load((root / "params.yaml").read_text())["data"]["source"]
    evaluated = {f"{source}/{r['path']}": r["predicted"]
                 for r in read_csv(root / "plots/eval/confusion.csv")}
    (root / "inputs.txt").write_text("".join(p + "\n" for p in sorted(evaluated)))
    proc = run_tool("predict", "@inputs.txt", "--model", "models/model.onnx",
                     "--out", "predictions.jsonl", cwd=root)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (root / "predictions.jsonl").read_text().splitlines()]
    assert {r["path"]: r["label"] for r in rows} == evaluated
    return len(rows)


def test_push_clone_pull_gives_the_exact_outs(pushed, tmp_path, monkeypatch):
    clone = fresh_clone(pushed, tmp_path / "elsewhere", monkeypatch)
    assert not (clone / "models/model.onnx").exists()
    dvc(clone, "pull")
    expected = lock_hashes(pushed)
    assert lock_hashes(clone) == expected
    for (_, out), digest in expected.items():  # every out is there, with dvc.lock's bytes
        path = clone / out
        assert path.exists(), out
        if path.is_file():
            assert md5(path) == digest, out
    assert "up to date" in dvc(clone, "status").stdout
    assert ran(dvc(clone, "repro")) == []
    # The pulled model works with the predict tool: same labels as evaluate's on the test split.
    assert predict_matches_evaluate(clone) > 0


def test_verify_reproduces_every_out_bit_identically(pushed):
    proc = verify(pushed)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = rows(proc)
    assert set(found) == {out for (_, out) in lock_hashes(pushed)}
    assert "models/model.onnx" in found and set(found.values()) == {IDENTICAL}


def test_experiment_travels_through_git_and_dvc_remotes(pushed, tmp_path, monkeypatch):
    dvc(pushed, "exp", "run", "-S", "train.lr=0.02", "-n", "fast-lr")
    expected = {"lock": lock_hashes(pushed),
                "eval": (pushed / "metrics/eval.json").read_text(),
                "model": md5(pushed / "models/model.pt")}
    dvc(pushed, "exp", "push", "origin", "fast-lr")  # git refs to origin, outs to S3
    clone = fresh_clone(pushed.parent / "origin.git", tmp_path / "elsewhere", monkeypatch)
    dvc(clone, "exp", "pull", "origin", "fast-lr")
    dvc(clone, "exp", "apply", "fast-lr")
    params = yaml.safe_load((clone / "params.yaml").read_text())
    assert params["train"]["lr"] == 0.02
    assert (clone / "metrics/eval.json").read_text() == expected["eval"]
    assert md5(clone / "models/model.pt") == expected["model"]
    assert lock_hashes(clone) == expected["lock"]
    assert "up to date" in dvc(clone, "status").stdout


def test_doctor_finds_the_remote_reachable(pushed, monkeypatch):
    from tools.doctor import remote_findings

    findings = remote_findings(pushed)
    assert [f.level for f in findings] == ["OK"], findings
    assert "reachable" in findings[0].message


def test_doctor_names_missing_credentials(pushed, monkeypatch, tmp_path):
    from tools.doctor import FAIL, remote_findings

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    findings = remote_findings(pushed)
    assert [f.level for f in findings] == [FAIL]
    assert "no S3 credentials" in findings[0].message
    assert "dvc remote modify --local s3 access_key_id" in findings[0].fix
    assert "AWS_ACCESS_KEY_ID" in findings[0].fix
    assert os.environ.get("AWS_ACCESS_KEY_ID") is None


def test_verify_fails_naming_the_out_of_a_param_committed_without_rerun(pushed):
    git(pushed, "reset", "-q", "--hard")  # drop the experiment applied above
    # params.yaml now says lr 0.05 but dvc.lock still holds the model trained with the default.
    set_params(pushed, {"train.lr": 0.05})
    git(pushed, "commit", "-qam", "lr changed, pipeline not re-run")
    proc = verify(pushed, "--stages", "train")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = rows(proc)
    assert found["models/model.pt"] == DIFFERENT
    assert found["data/processed"] == IDENTICAL  # upstream still matches
    assert "evaluate" not in proc.stdout  # only train and what it depends on
    assert "not identical: " in proc.stdout and "models/model.pt" in proc.stdout.splitlines()[-1]


def test_verify_gets_dvc_added_inputs_from_the_cache_or_with_pull_from_the_remote(
        pushed, tmp_path):
    shutil.copytree(pushed / "data/sample", pushed / "data/raw")
    dvc(pushed, "add", "data/raw")
    set_params(pushed, {"data.source": "data/raw"})
    dvc(pushed, "repro", "ingest")
    dvc(pushed, "remote", "add", "-d", "shared", str(tmp_path / "store"))
    dvc(pushed, "push", "data/raw.dvc")
    git(pushed, "add", "-A")
    git(pushed, "commit", "-qm", "own data in data/raw, directory remote")
    for args in ([], ["--pull"]):
        proc = verify(pushed, "--stages", "ingest", *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert rows(proc) == {"data/manifest.csv": IDENTICAL}
    shutil.rmtree(tmp_path / "store")
    proc = verify(pushed, "--stages", "ingest", "--pull")
    assert proc.returncode == 1
    assert "does not exist" in proc.stderr and "fix: mkdir -p" in proc.stderr
