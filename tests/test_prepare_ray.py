"""Issue 31, prepare on a Ray cluster: `prepare.engine: ray` with `prepare.ray_address` writes
the same data/processed/, byte for byte, and the same dvc.lock as `engine: local`.

One two-node Ray cluster on 127.0.0.1 (one CPU per node) for the whole module: each prepare
run connects to it by its address, as a real cluster's would be given."""
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stages.lib.io import StageError
from tests.conftest import ROOT, copy_run, run_stage
from tests.test_remote import KEY, SECRET, pushed, s3  # noqa: F401 (fixtures)
from tests.test_scale_prepare import make_dataset
from tools.project import dvc, set_params


@pytest.fixture(scope="module")
def cluster():
    """A head and a second node on loopback (Ray's one-machine mode binds 127.0.0.1 only),
    each with the S3 credentials of the test's S3 server (a node's own, as on a cluster)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        env.setenv("RAY_USAGE_STATS_ENABLED", "0")
        for name, value in (("AWS_ACCESS_KEY_ID", KEY), ("AWS_SECRET_ACCESS_KEY", SECRET),
                            ("AWS_DEFAULT_REGION", "us-east-1"),
                            ("AWS_EC2_METADATA_DISABLED", "true")):
            env.setenv(name, value)
        from ray.cluster_utils import Cluster

        nodes = Cluster(initialize_head=True,
                        head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            nodes.add_node(num_cpus=1)
            nodes.wait_for_nodes()
            assert nodes.address.startswith("127.0.0.1:"), nodes.address
            yield nodes
        finally:
            nodes.shutdown()


def tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def through_ray(cluster, run: Path, dest: Path):
    """A copy of a committed run whose params say engine ray at the cluster; `dvc repro
    --force --single-item prepare` runs prepare there. Returns (copy, its DVC output)."""
    project = copy_run(run, dest)
    set_params(project, {"prepare.engine": "ray", "prepare.ray_address": cluster.address})
    proc = dvc(project, "repro", "--force", "--single-item", "prepare")
    return project, proc.stdout


def assert_same_outs_and_lock(run: Path, project: Path, stdout: str):
    assert "Running stage 'prepare'" in stdout, stdout
    assert "(Ray at 127.0.0.1:" in stdout and "2 CPUs on 2 nodes)" in stdout, stdout
    want = tree(run / "data/processed")
    assert len(want) > 4 and tree(project / "data/processed") == want
    # the lock a Ray run writes is the local run's, and nothing downstream is out of date
    assert (project / "dvc.lock").read_bytes() == (run / "dvc.lock").read_bytes()
    proc = dvc(project, "repro")
    assert not re.findall(r"Running stage '([^']+)'", proc.stdout), proc.stdout


def test_classification_through_ray_is_the_local_run(cluster, trained_project, tmp_path):
    project, stdout = through_ray(cluster, trained_project, tmp_path / "project")
    assert_same_outs_and_lock(trained_project, project, stdout)


def test_detection_boxes_ride_along(cluster, detection_project, tmp_path):
    """Detection's targets (boxes through the letterbox) come back with the pixels."""
    project, stdout = through_ray(cluster, detection_project, tmp_path / "project")
    assert_same_outs_and_lock(detection_project, project, stdout)


@pytest.mark.parametrize("mode", ["explicit", "auto"])
def test_mixed_files_and_auto_choices_match_local(cluster, tmp_path, mode):
    """Colour and grey JPEG/PNG/GIF of many sizes, 5-row shards (chunks end at shard ends):
    the header pass (auto size/channels), the hints and auto mean/std from the tasks' facts
    give the local run's lines and bytes."""
    make_dataset(tmp_path)
    if mode == "auto":
        set_params(tmp_path, {"prepare.image_size": "auto", "prepare.channels": "auto",
                              "prepare.mean": "auto", "prepare.std": "auto"})
    else:
        set_params(tmp_path, {"prepare.image_size": 24, "prepare.channels": 3})
    outs, trees = [], []
    for params in ({"prepare.engine": "local", "prepare.ray_address": ""},
                   {"prepare.engine": "ray", "prepare.ray_address": cluster.address}):
        set_params(tmp_path, params)
        proc = run_stage("prepare", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout.rsplit(" (", 1)[0])  # less where it ran
        trees.append(tree(tmp_path / "data/processed"))
    assert outs[0] == outs[1]
    assert ("(auto: " if mode == "auto" else "auto would choose") in outs[0]
    assert trees[0] == trees[1] and len(trees[0]) > 20


def test_inputs_from_the_dvc_remotes_s3(cluster, pushed, tmp_path):  # noqa: F811
    """prepare.ray_inputs: remote: the tasks read data.source's files from the DVC remote (S3
    on loopback) as `dvc push` stored them; the folder itself is nowhere the run can see."""
    project = copy_run(pushed, tmp_path / "project")
    shutil.move(project / "data/sample", tmp_path / "elsewhere")
    set_params(project, {"prepare.engine": "ray", "prepare.ray_address": cluster.address,
                         "prepare.ray_inputs": "remote"})
    proc = run_stage("prepare", cwd=project)
    assert proc.returncode == 0, proc.stderr
    want = tree(pushed / "data/processed")
    assert len(want) > 4 and tree(project / "data/processed") == want


def shmem_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssShmem"))


def test_the_driver_gives_back_the_store_pages_it_read(cluster, monkeypatch):
    """A large result is read straight from the object store's shared memory and would stay
    in the driver's RSS; StorePages.release drops those pages (the data is untouched)."""
    import numpy as np

    from stages.lib.data import raycluster
    from stages.lib.data.raycluster import StorePages

    for name in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_USAGE_STATS_ENABLED"):
        monkeypatch.setenv(name, "0")  # connect sets them: put back after this test
    ray = raycluster.connect(cluster.address)
    try:
        blob = ray.remote(lambda i: np.full(8 << 20, i, dtype=np.uint8))
        pages, grown, left = StorePages(), [], []
        for i in range(4):
            before = shmem_kib()
            x = ray.get(blob.remote(i))
            assert int(x.sum(dtype=np.int64)) == i * (8 << 20)  # every page read
            grown.append(shmem_kib() - before)
            pages.release(x)
            left.append(shmem_kib() - before)
            assert x[:: 4096].tolist() == [i] * (2048)  # still there: faulted back in
            pages.release(x)
            del x
        assert min(grown) > 6 << 10, grown  # 8 MiB read: counted in RSS
        assert max(left) < 1 << 10, left  # given back
    finally:
        raycluster.disconnect()


def test_a_file_the_workers_cannot_read_names_where_the_data_must_live(cluster, tmp_path):
    make_dataset(tmp_path)
    (tmp_path / "src/1/013.png").unlink()
    set_params(tmp_path, {"prepare.image_size": 16, "prepare.channels": 1,
                          "prepare.engine": "ray", "prepare.ray_address": cluster.address})
    proc = run_stage("prepare", cwd=tmp_path)
    assert proc.returncode != 0
    assert "013.png: not found by a Ray worker" in proc.stderr, proc.stderr
    assert "every node mounts" in proc.stderr and str(tmp_path / "src") in proc.stderr
    left = [p.name for p in (tmp_path / "data/processed").rglob("*")]
    assert not [name for name in left if name.endswith(".tmp")], left
    assert "meta.json" not in left


def test_an_unreachable_address_is_a_one_line_error_at_once(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    make_dataset(tmp_path)
    set_params(tmp_path, {"prepare.engine": "ray", "prepare.ray_address": f"127.0.0.1:{port}"})
    proc = run_stage("prepare", cwd=tmp_path)
    assert proc.returncode == 1
    assert f"prepare.ray_address: no Ray cluster answers at 127.0.0.1:{port}" in proc.stderr
    assert "ray start --head" in proc.stderr and "Traceback" not in proc.stderr


def test_remote_inputs_need_a_folder_dvc_tracks(tmp_path):
    make_dataset(tmp_path)
    set_params(tmp_path, {"prepare.engine": "ray", "prepare.ray_inputs": "remote"})
    proc = run_stage("prepare", cwd=tmp_path)
    assert proc.returncode == 1
    assert f"{tmp_path / 'src'} is not a folder DVC tracks" in proc.stderr, proc.stderr
    assert "set prepare.ray_inputs to path" in proc.stderr and "Traceback" not in proc.stderr


def test_engine_and_address_are_checked(tmp_path):
    from stages.lib.params import load

    path = tmp_path / "params.yaml"
    for values, message in (({"engine": "spark"}, r"`prepare\.engine` must be one of local, ray"),
                            ({"ray_address": "10.0.0.1:6379"},
                             r"`prepare\.ray_address` .* only used with prepare\.engine: ray"),
                            ({"ray_inputs": "remote"},
                             r"`prepare\.ray_inputs: remote` needs prepare\.engine: ray"),
                            ({"engine": "ray", "ray_inputs": "s3"},
                             r"`prepare\.ray_inputs` must be one of path, remote")):
        path.write_text(yaml.safe_dump({"prepare": values}))
        with pytest.raises(StageError, match=message):
            load("prepare", path)


def test_where_prepare_runs_is_in_no_stage_params_nor_out():
    """dvc.yaml: no stage lists prepare.workers/engine/ray_address (the report lists every
    other param), and export's provenance and the report's params hash leave them out."""
    from stages.lib.door import REPORT_PARAMS
    from stages.lib.params import PREPARE_PLACEMENT, SECTIONS, without_placement

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert stages["report"]["params"] == ["task", *REPORT_PARAMS]
    for name, stage in stages.items():
        for key in stage.get("params", []):
            assert key != "prepare" and key not in {f"prepare.{k}" for k in PREPARE_PLACEMENT}, \
                (name, key)
    assert set(SECTIONS) <= {key.split(".")[0] for key in REPORT_PARAMS}
    assert without_placement("prepare", {"workers": 2, "engine": "ray", "shard_size": 8}) == \
        {"shard_size": 8}


def test_help_imports_neither_ray_nor_torch():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = ("import sys, runpy; sys.argv = ['prepare', '--help']\n"
            "try:\n    runpy.run_module('stages.prepare', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print(sorted({'ray', 'torch'} & set(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("[]"), proc.stdout + proc.stderr
