"""tools.doctor tells a missing object on the DVC remote from a corrupt one (issue 41, item 12),
on a directory remote and on S3 (moto's server on loopback), and what `verify = true` changes.

A tiny project: one stage writes models/model.pt and a folder, `dvc repro`, `dvc push`; then one
byte of the remote's copy is flipped, or the object deleted."""
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.doctor import FAIL, OK, WARN, remote_sync_findings
from tools.project import dvc, git

BUCKET = "dvc-objects"
STAGE = """stages:
  make:
    cmd: python make.py
    deps: [make.py]
    outs: [models/model.pt, data/folder]
"""
MAKE = """from pathlib import Path
Path("models").mkdir(exist_ok=True)
Path("models/model.pt").write_bytes(bytes(range(256)) * 64)
Path("data/folder").mkdir(parents=True, exist_ok=True)
for i in range(3):
    Path(f"data/folder/{i}.bin").write_bytes(bytes([i]) * 1000)
"""


def project(root: Path) -> Path:
    root.mkdir(parents=True)
    git(root, "init", "-q")
    git(root, "config", "user.name", "t")
    git(root, "config", "user.email", "t@localhost")
    dvc(root, "init", "-q")
    (root / "dvc.yaml").write_text(STAGE)
    (root / "make.py").write_text(MAKE)
    dvc(root, "repro")
    return root


def commit(root: Path) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-qm", "run")


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


MODEL_MD5 = md5(bytes(range(256)) * 64)


def key(digest: str) -> str:
    return f"files/md5/{digest[:2]}/{digest[2:]}"


def flip(path: Path) -> None:
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))


def levels(findings) -> list[str]:
    return [f.level for f in findings]


def test_directory_remote_missing_and_corrupt_objects_are_told_apart(tmp_path):
    repo, store = project(tmp_path / "repo"), tmp_path / "store"
    store.mkdir()
    dvc(repo, "remote", "add", "-d", "shared", str(store))
    dvc(repo, "remote", "modify", "shared", "verify", "true")
    commit(repo)
    dvc(repo, "push")
    assert levels(remote_sync_findings(repo)) == [OK]

    obj = store / key(MODEL_MD5)
    flip(obj)
    bad = md5(obj.read_bytes())
    [finding] = remote_sync_findings(repo)
    assert finding.level == FAIL
    assert finding.message.startswith("models/model.pt: the remote's copy is corrupt: ")
    assert f"{obj} has md5 {bad}, dvc.lock names {MODEL_MD5}" in \
        finding.message
    assert "dvc push -r shared from a machine that has the good copy" in finding.fix
    assert "dvc repro" in finding.fix and f"rm -f {obj}" in finding.fix

    # the CLI: an error, exit code 1 (DVC's own `dvc status -c` then deleted the bad object)
    flip(store / key(MODEL_MD5)) if (store / key(MODEL_MD5)).exists() else \
        (obj.write_bytes(bytes(range(256)) * 64), flip(obj))
    lock = tmp_path / "one.lock"
    lock.write_text("click\n")
    proc = subprocess.run([sys.executable, "-m", "tools.doctor", "--lock", str(lock)], cwd=repo,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL  remote sync  models/model.pt: the remote's copy is corrupt" in proc.stdout

    # deleted instead: missing, a warning naming where it should be
    obj.unlink(missing_ok=True)  # (DVC's `dvc status -c` may have deleted it already)
    [finding] = remote_sync_findings(repo)
    assert finding.level == WARN and "corrupt" not in finding.message
    assert "models/model.pt" in finding.message and f"no object at {obj}" in finding.message

    # `dvc push` from this machine (it has the good copy) repairs both
    flip_target = store / key(md5(b"\x01" * 1000))
    flip(flip_target)  # a file inside a tracked folder
    [corrupt, missing] = sorted(remote_sync_findings(repo), key=lambda f: f.level)
    assert corrupt.level == FAIL and corrupt.message.startswith("data/folder: ")
    assert missing.level == WARN and "models/model.pt" in missing.message
    dvc(repo, "push")  # the missing one goes back; the corrupt one in the folder is skipped
    assert levels(remote_sync_findings(repo)) == [FAIL]
    flip_target.unlink()  # the fix: delete the bad object, then push
    dvc(repo, "push")
    assert levels(remote_sync_findings(repo)) == [OK]


def test_with_verify_a_corrupt_folder_listing_pulls_wrong_files_with_exit_0(tmp_path):
    """The case behind "one out came down corrupt with exit 0 although verify = true": a
    flipped byte in a folder's listing (the remote's .dir object) that still parses, here a
    file's name (1.bin -> 3.bin). DVC checks each file object's bytes on pull but never the
    listing's own md5, so `dvc pull` exits 0 with a wrong tree; a flipped byte in a file object
    fails the pull instead. doctor calls both corrupt, naming the object (not "missing")."""
    repo, store = project(tmp_path / "repo"), tmp_path / "store"
    store.mkdir()
    dvc(repo, "remote", "add", "-d", "shared", str(store))
    dvc(repo, "remote", "modify", "shared", "verify", "true")
    commit(repo)
    dvc(repo, "push")
    [listing] = store.glob("files/md5/*/*.dir")
    data = listing.read_bytes()
    at = data.index(b'"1.bin"') + 1
    os.chmod(listing, 0o644)
    listing.write_bytes(data[:at] + bytes([data[at] ^ 2]) + data[at + 1:])  # "3.bin"
    [finding] = remote_sync_findings(repo)
    assert finding.level == FAIL and finding.message.startswith(
        "data/folder: the remote's copy is corrupt: ")
    assert f"{listing} has md5 {md5(listing.read_bytes())}" in finding.message
    assert "exits 0 and installs the files the bad listing names" in finding.message

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    pull = subprocess.run([sys.executable, "-m", "dvc", "pull"], cwd=clone,
                          capture_output=True, text=True)
    assert pull.returncode == 0, pull.stdout + pull.stderr  # DVC's behaviour, established
    assert sorted(p.name for p in (clone / "data/folder").iterdir()) == \
        ["0.bin", "2.bin", "3.bin"]
    assert (clone / "models/model.pt").read_bytes() == (repo / "models/model.pt").read_bytes()
    [finding] = remote_sync_findings(clone)  # from the clone too: corrupt, not missing
    assert finding.level == FAIL and "data/folder: the remote's copy is corrupt" in \
        finding.message

    # a flipped byte in a file object, by contrast, fails the pull (verify = true)
    flip(store / key(MODEL_MD5))
    assert "models/model.pt: the remote's copy is corrupt" in " ".join(
        f.message for f in remote_sync_findings(repo))
    other = tmp_path / "clone2"
    git(tmp_path, "clone", "-q", str(repo), str(other))
    pull = subprocess.run([sys.executable, "-m", "dvc", "pull", "models/model.pt"], cwd=other,
                          capture_output=True, text=True)
    assert pull.returncode != 0 and "Checkout failed" in pull.stderr
    assert not (other / "models/model.pt").exists()


@pytest.fixture
def s3(monkeypatch):
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for var, value in (("AWS_ACCESS_KEY_ID", "k"), ("AWS_SECRET_ACCESS_KEY", "s"),
                       ("AWS_DEFAULT_REGION", "us-east-1"), ("AWS_EC2_METADATA_DISABLED", "true")):
        monkeypatch.setenv(var, value)
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=BUCKET)
    yield endpoint, client
    server.stop()


def s3_project(tmp_path, endpoint, verify: bool) -> Path:
    repo = project(tmp_path / "repo")
    dvc(repo, "remote", "add", "-d", "s3", f"s3://{BUCKET}/store")
    dvc(repo, "remote", "modify", "s3", "endpointurl", endpoint)
    if verify:
        dvc(repo, "remote", "modify", "s3", "verify", "true")
    commit(repo)
    dvc(repo, "push")
    return repo


def flip_s3(client, name: str) -> bytes:
    data = bytearray(client.get_object(Bucket=BUCKET, Key=name)["Body"].read())
    data[100] ^= 1
    client.put_object(Bucket=BUCKET, Key=name, Body=bytes(data))
    return bytes(data)


def test_s3_corrupt_object_is_an_error_naming_the_object_and_the_fix(tmp_path, s3):
    endpoint, client = s3
    repo = s3_project(tmp_path, endpoint, verify=True)
    assert levels(remote_sync_findings(repo)) == [OK]
    name = f"store/{key(MODEL_MD5)}"
    bad = flip_s3(client, name)
    # DVC's own status does not see it: the object exists
    assert "models/model.pt" not in dvc(repo, "status", "-c").stdout
    [finding] = remote_sync_findings(repo)
    assert finding.level == FAIL
    assert f"s3://{BUCKET}/{name} has md5 {md5(bad)}, dvc.lock names {MODEL_MD5}" in \
        finding.message
    # `dvc push` trusts an S3 object that exists: the fix deletes it first
    assert f"aws s3 rm s3://{BUCKET}/{name}" in finding.fix
    assert "Everything is up to date" in dvc(repo, "push").stdout
    assert levels(remote_sync_findings(repo)) == [FAIL]
    client.delete_object(Bucket=BUCKET, Key=name)
    [finding] = remote_sync_findings(repo)
    assert finding.level == WARN and f"no object at s3://{BUCKET}/{name}" in finding.message
    dvc(repo, "push")
    assert levels(remote_sync_findings(repo)) == [OK]


def test_without_verify_an_s3_pull_installs_a_corrupt_object_silently(tmp_path, s3):
    """Why doctor must look: without verify, `dvc pull` of a corrupt S3 object exits 0 and
    leaves the bad bytes in the workspace and the cache."""
    endpoint, client = s3
    repo = s3_project(tmp_path, endpoint, verify=False)
    flip_s3(client, f"store/{key(MODEL_MD5)}")
    git(tmp_path, "clone", "-q", str(repo), "clone")
    clone = tmp_path / "clone"
    proc = dvc(clone, "pull", check=False)
    assert proc.returncode == 0, proc.stderr
    assert md5((clone / "models/model.pt").read_bytes()) != MODEL_MD5  # silently wrong
    [finding] = remote_sync_findings(clone)
    assert finding.level == FAIL and "corrupt" in finding.message
