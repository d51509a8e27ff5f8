"""Issue 39, item 4: predict by name. `--model NAME@v1.2.0`, `NAME#prod` and `NAME` (the latest
version) from `--registry GIT_URL` (a bare repository here: no clone), fetched once into the
model cache, hash-checked before every load. A corrupt object fails predict, naming the
artifact and the hash, and no row is written. tests/fake_registry.py builds the registry.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, write_image
from tests.fake_registry import LABELS, build, object_path
from tools.project import git

pytestmark = pytest.mark.e2e  # git, dvc repro and dvc push of a tiny registry

FIELDS = ("artifact", "artifact_version", "stage", "commit", "data_version")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    found = build(tmp_path_factory.mktemp("registry"))
    images = found.repo.parent / "images"
    for i in range(3):
        write_image(images / f"{i}.png", size=(12, 10), seed=i)
    found.images = images
    return found


def predict(*args, cwd, cache):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DVC_NO_ANALYTICS": "1",
           "IMAGE_PIPELINE_MODEL_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "tools.predict", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env=env)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def lock_md5(repo: Path, rev: str, name: str) -> str:
    import yaml

    lock = yaml.safe_load(git(repo, "show", f"{rev}:dvc.lock"))
    return lock["stages"][name]["outs"][0]["md5"]


def test_a_reference_or_a_path():
    from tools.registry.models import Ref, parse

    assert parse("ocr#prod") == Ref("ocr", stage="prod")
    assert parse("ocr@v1.2.0") == Ref("ocr", version="v1.2.0")
    assert parse("ocr") == Ref("ocr")
    assert parse("pipelines/ocr:ocr#prod") == Ref("pipelines/ocr:ocr", stage="prod")
    for path in ("models/model.onnx", "model.onnx", "models/int8/model.int8.onnx",
                 "models/openvino/model.xml", "weights/x", str(ROOT / "params.yaml"), None):
        assert parse(path) is None, path


def test_predict_by_name_writes_the_files_rows_and_names_the_version(registry, tmp_path):
    """In an empty folder, no clone: the rows of `--model ocr#prod` are those of the file that
    version's commit holds, plus the artifact, version, stage, commit and data version."""
    origin, v1, v2 = registry.origin, registry.commits["v0.1.0"], registry.commits["v0.2.0"]
    (tmp_path / "ocr-v1.onnx").write_bytes(subprocess.run(
        ["git", "show", f"{v1}:src/ocr.onnx"], cwd=registry.repo, capture_output=True,
        check=True).stdout)
    cache = tmp_path / "cache"
    proc = predict(registry.images, "--model", "ocr#prod", "--registry", origin, "--out",
                   "prod.jsonl", cwd=tmp_path, cache=cache)
    assert proc.returncode == 0, proc.stderr
    proc = predict(registry.images, "--model", "ocr-v1.onnx", "--out", "file.jsonl",
                   cwd=tmp_path, cache=cache)
    assert proc.returncode == 0, proc.stderr
    by_name, by_file = rows(tmp_path / "prod.jsonl"), rows(tmp_path / "file.jsonl")
    assert [{k: v for k, v in r.items() if k not in FIELDS} for r in by_name] == by_file
    assert all(r["label"] == LABELS[("ocr", "v0.1.0")] for r in by_name)
    assert {tuple(r[k] for k in FIELDS) for r in by_name} == {
        ("ocr", "v0.1.0", "prod", v1, "0" * 32)}
    # the cache holds the file under the md5 the tagged commit's dvc.lock records
    want = lock_md5(registry.repo, v1, "ocr")
    assert [p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file()] == [
        f"{want[:2]}/{want[2:]}/ocr.onnx"]
    for model, version, stage, commit in (("ocr@v0.2.0", "v0.2.0", "", v2),
                                          ("ocr", "v0.2.0", "", v2),  # the latest
                                          ("detector@v0.1.0", "v0.1.0", "prod", v1)):
        proc = predict(registry.images, "--model", model, "--registry", origin, "--out", "-",
                       cwd=tmp_path, cache=cache)
        assert proc.returncode == 0, proc.stderr
        got = [json.loads(line) for line in proc.stdout.splitlines()]
        name = model.partition("@")[0]
        assert len(got) == 3 and all(r["label"] == LABELS[(name, version)] for r in got)
        assert {(r["artifact"], r["artifact_version"], r["stage"], r["commit"]) for r in got} \
            == {(name, version, stage, commit)}
    # --registry defaults to the repository the working directory is in
    proc = predict(registry.images, "--model", "detector#prod", "--out", "-",
                   cwd=registry.repo, cache=cache)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[0])["artifact_version"] == "v0.1.0"
    proc = predict(registry.images, "--model", "ocr-v1.onnx", "--registry", origin,
                   cwd=tmp_path, cache=cache)
    assert proc.returncode == 1 and "is a file path: drop --registry" in proc.stderr


def flip(path: Path) -> bytes:
    good = path.read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x01
    path.chmod(0o644)
    path.write_bytes(bytes(bad))
    return good


def test_fetched_once_and_checked_before_every_load(registry, tmp_path):
    """The second run reads the cache (the remote's object can be gone); a flipped byte in
    the cache fails the next run, naming the artifact and the hash, before a row is written."""
    v1 = registry.commits["v0.1.0"]
    want = lock_md5(registry.repo, v1, "detector")
    cache, obj = tmp_path / "cache", object_path(registry.store, want)
    args = (registry.images, "--model", "detector#prod", "--registry", registry.origin)
    assert predict(*args, "--out", "a.jsonl", cwd=tmp_path, cache=cache).returncode == 0
    hidden = obj.with_name(obj.name + ".away")
    obj.rename(hidden)
    try:
        proc = predict(*args, "--out", "b.jsonl", cwd=tmp_path, cache=cache)
        assert proc.returncode == 0, proc.stderr  # fetched once: the cache served it
    finally:
        hidden.rename(obj)
    cached = cache / want[:2] / want[2:] / "detector.onnx"
    flip(cached)
    proc = predict(*args, "--out", "c.jsonl", cwd=tmp_path, cache=cache)
    assert proc.returncode == 1
    assert f"artifact detector v0.1.0: the cached copy {cached} has md5 " in proc.stderr
    assert f"records {want}" in proc.stderr and f"rm {cached}" in proc.stderr
    assert not (tmp_path / "c.jsonl").exists()


def test_a_corrupt_object_in_the_remote_fails_predict_and_writes_no_row(registry, tmp_path):
    want = lock_md5(registry.repo, registry.commits["v0.1.0"], "ocr")
    obj = object_path(registry.store, want)
    good = flip(obj)
    try:
        proc = predict(registry.images, "--model", "ocr#prod", "--registry", registry.origin,
                       "--out", "rows.jsonl", cwd=tmp_path, cache=tmp_path / "cache")
    finally:
        obj.write_bytes(good)
    assert proc.returncode == 1
    assert "Error: artifact ocr v0.1.0: the remote's copy of models/ocr.onnx has md5" in \
        proc.stderr and f"records {want}" in proc.stderr and "corrupt" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["cache"]  # no rows, no model file
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))
