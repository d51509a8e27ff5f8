"""Issue 31: `tools.predict --ray ADDRESS` on a two-node Ray cluster on 127.0.0.1: the same
bytes as the local predict (classification, detection, segmentation with --out-dir masks), a
node removed mid-run, a driver SIGKILL and a re-run. One cluster for the whole module."""
import filecmp
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, write_image

pytestmark = pytest.mark.e2e

BATCH = ["--batch-size", "8", "--ray-shard", "1"]  # 8 files a shard: many shards, 2 actors


@pytest.fixture(scope="module")
def cluster():
    """(cluster, its address, the non-head node): 1 CPU each, everything on 127.0.0.1."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # Ray's loopback-only mode
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(ROOT)  # the nodes' workers import the project from there
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                                                      "include_dashboard": False})
    try:
        node = c.add_node(num_cpus=1)
        c.wait_for_nodes()
        yield c, c.address, node
    finally:
        c.shutdown()
        if before is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = before


def predict(cwd, *args, env=None, wait=True):
    cmd = [sys.executable, "-m", "tools.predict", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    if not wait:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def model_args(project):
    return ["--model", str(project / "models/model.onnx"), "--max-pixels", "100000"]


@pytest.fixture(scope="module")
def classified(trained_project, tmp_path_factory):
    """(image folder, the local predict's output bytes): the sample's 200 images and bad
    files (not an image, empty, cut, too large), predicted locally."""
    root = tmp_path_factory.mktemp("rayin") / "images"
    shutil.copytree(trained_project / "data/sample", root)
    (root / "0/notes.pgm").write_bytes(b"plain text, not an image\n")
    (root / "1/empty.pgm").write_bytes(b"")
    (root / "2/cut.pgm").write_bytes((root / "2/0002.pgm").read_bytes()[:20])
    write_image(root / "8/huge.png", size=(400, 300))
    out = root.parent / "local.jsonl"
    proc = predict(root, ".", *model_args(trained_project), *BATCH, "--out", str(out))
    assert proc.returncode == 3, proc.stderr  # some inputs failed
    return root, out.read_bytes()


def test_unreachable_address_fails_in_seconds_naming_the_fix(tmp_path):
    import socket

    write_image(tmp_path / "a.png")
    with socket.socket() as s:  # a free port on loopback: nothing answers there
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    start = time.monotonic()
    proc = predict(tmp_path, "a.png", "--out", "p.jsonl", "--ray", address)
    assert proc.returncode == 1 and time.monotonic() - start < 30
    assert f"--ray no Ray cluster answers at {address}" in proc.stderr
    assert "ray start --head" in proc.stderr
    assert not (tmp_path / "p.jsonl").exists()  # nothing written
    proc = predict(tmp_path, "a.png", "--ray", "nohost")
    assert proc.returncode == 1 and "not a Ray address" in proc.stderr


def test_cluster_binds_to_loopback(cluster):
    c, address, node = cluster
    assert address.startswith("127.0.0.1:")
    assert {n.node_ip_address for n in c.list_all_nodes()} == {"127.0.0.1"}


def test_rows_equal_the_local_predict_byte_for_byte(cluster, classified, trained_project,
                                                    tmp_path):
    root, local = classified
    out = tmp_path / "ray.jsonl"
    proc = predict(root, ".", *model_args(trained_project), *BATCH, "--out", str(out),
                   "--ray", cluster[1])
    assert proc.returncode == 3, proc.stderr
    assert out.read_bytes() == local
    assert "failed" in proc.stdout and "images/s" in proc.stdout
    rows = [json.loads(line) for line in local.decode().splitlines()]
    errors = {r["path"]: r["error"].split(":")[0] for r in rows if r["error"]}
    assert errors == {"0/notes.pgm": "unsupported", "1/empty.pgm": "unsupported",
                      "2/cut.pgm": "corrupt", "8/huge.png": "too_large"}


@pytest.mark.parametrize("task", ["detection", "segmentation"])
def test_other_tasks_equal_the_local_predict(cluster, task, request, tmp_path):
    project = request.getfixturevalue(f"{task}_project")
    src = project / "data/sample/images"
    assert src.is_dir()
    extra = ["--out-dir", "masks"] if task == "segmentation" else []
    args = [str(src), "--model", str(project / "models/model.onnx"), *BATCH, *extra]
    proc = predict(tmp_path, *args, "--out", "local.jsonl")
    assert proc.returncode == 0, proc.stderr
    if extra:
        (tmp_path / "masks").rename(tmp_path / "masks.local")
    proc = predict(tmp_path, *args, "--out", "ray.jsonl", "--ray", cluster[1])
    assert proc.returncode == 0, proc.stderr
    local = (tmp_path / "local.jsonl").read_bytes()
    assert (tmp_path / "ray.jsonl").read_bytes() == local and local.count(b"\n") >= 40
    if extra:
        masks = sorted(p.relative_to(tmp_path / "masks") for p in
                       (tmp_path / "masks").rglob("*.png"))
        assert len(masks) == local.count(b"\n")
        assert sorted(p.relative_to(tmp_path / "masks.local") for p in
                      (tmp_path / "masks.local").rglob("*.png")) == masks
        for rel in masks:
            assert filecmp.cmp(tmp_path / "masks" / rel, tmp_path / "masks.local" / rel,
                               shallow=False), rel


def test_bare_ray_starts_a_local_cluster_of_its_own(classified, trained_project, tmp_path):
    """A bare --ray: a one-machine cluster on 127.0.0.1 for this run (not the module's cluster,
    although it is the latest started on this machine), the same bytes."""
    root, local = classified
    out = tmp_path / "ray.jsonl"
    proc = predict(root, ".", *model_args(trained_project), *BATCH, "--out", str(out), "--ray")
    assert proc.returncode == 3, proc.stderr
    assert out.read_bytes() == local


def lines(path):
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_driver_sigkill_then_rerun_ends_with_the_same_file(cluster, classified,
                                                           trained_project, tmp_path):
    root, local = classified
    out = tmp_path / "ray.jsonl"
    args = [".", *model_args(trained_project), *BATCH, "--out", str(out), "--ray", cluster[1]]
    proc = predict(root, *args, env={"PIPELINE_TEST_PREDICT_DELAY_S": "0.3"}, wait=False)
    deadline = time.monotonic() + 120
    while lines(out) < 40 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 0 < lines(out) < local.count(b"\n")
    rerun = predict(root, *args)
    assert rerun.returncode == 3, rerun.stderr
    assert "already in" in rerun.stdout
    assert out.read_bytes() == local


def test_node_removed_mid_run_loses_and_duplicates_nothing(cluster, classified,
                                                           trained_project, tmp_path):
    c, address, node = cluster
    root, local = classified
    out = tmp_path / "ray.jsonl"
    proc = predict(root, ".", *model_args(trained_project), *BATCH, "--out", str(out),
                   "--ray", address, env={"PIPELINE_TEST_PREDICT_RAY_DELAY_S": "0.4"},
                   wait=False)
    deadline = time.monotonic() + 120
    while lines(out) < 24 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None and lines(out) < local.count(b"\n") / 2
    c.remove_node(node)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 3, stderr
    assert "resubmitted" in stderr  # a shard in flight on the removed node was lost
    assert out.read_bytes() == local  # complete, in order, no row twice
