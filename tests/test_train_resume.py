"""The train stage as a process on a tiny prepared dataset: bit-exact resume after SIGKILL,
num_workers independence, loud failure on a poisoned sample, fresh start on a param change,
and torchrun with 2 processes on CPU.

Each test runs `python -m stages.train` in its own temp directory holding data/processed,
data/split/train.csv and params.yaml (48 train images of 8x8, 6 optimiser steps per epoch).
"""
import json
import random
import shutil

import numpy as np
import pytest
import torch
import yaml

from stages.lib.io import write_csv
from stages.lib.data.shards import write_processed
from tests.conftest import run_stage

STEPS_PER_EPOCH = 6
TINY = {"epochs": 3, "batch_size": 8, "lr": 0.01, "checkpoint_every_steps": 4,
        "aug_crop_scale": 0.8, "aug_hflip": 0.5, "aug_jitter": 0.1}
KILLED = -9


def make_tiny(root, train=None):
    """data/processed + data/split/train.csv + params.yaml for a 2-class 8x8 problem."""
    rng = np.random.default_rng(0)
    arrays = {}
    for split, n in (("train", 48), ("val", 16)):
        y = np.arange(n) % 2
        x = (rng.integers(0, 100, (n, 8, 8, 1)) + 120 * y[:, None, None, None]).astype(np.uint8)
        arrays[split] = (x, y.astype(np.int64))
    meta = {"classes": ["a", "b"], "image_size": 8, "channels": 1, "mean": [0.5], "std": [0.5],
            "counts": {"test": 0}}
    # shards of 20: batches of 8 straddle shard ends, the val split has a short one
    write_processed(root / "data/processed", arrays, meta, shard_size=20)
    write_csv(root / "data/split/train.csv",
              [{"path": f"{'ab'[i % 2]}/{i:03d}.png", "label": "ab"[i % 2]} for i in range(48)],
              ["path", "label"])
    set_train(root, {**TINY, **(train or {})})
    return root


def set_train(root, train):
    (root / "params.yaml").write_text(yaml.safe_dump({"train": train}))


def train_stage(root, **env):
    import os

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update({k: str(v) for k, v in env.items()})
    try:
        return run_stage("train", cwd=root)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v


def outs(root) -> dict:
    """Bytes of every tracked out of the stage (checkpoints excluded)."""
    files = [root / "models/model.pt", root / "metrics/train.json",
             *sorted((root / "plots/train").rglob("*.*"))]
    return {str(f.relative_to(root)): f.read_bytes() for f in files}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    root = make_tiny(tmp_path_factory.mktemp("baseline"))
    proc = train_stage(root)
    assert proc.returncode == 0, proc.stderr
    assert "starting fresh: no checkpoint" in proc.stdout
    return outs(root)


def test_uninterrupted_history_has_one_row_per_epoch(baseline):
    acc = baseline["plots/train/plots/metrics/val/acc.tsv"].decode().splitlines()
    assert acc == ["step\tacc"] + [f"{i}\t{a.split()[1]}" for i, a in enumerate(acc[1:])]
    assert len(acc) == 1 + TINY["epochs"]


@pytest.mark.parametrize("trial", ["mid-epoch", "epoch-boundary", "after-boundary",
                                   "at-first-checkpoint", "random"])
def test_killed_run_resumes_to_identical_bytes(baseline, tmp_path, trial):
    total = TINY["epochs"] * STEPS_PER_EPOCH
    step = {"mid-epoch": 9, "epoch-boundary": 2 * STEPS_PER_EPOCH,
            "after-boundary": STEPS_PER_EPOCH + 1,
            "at-first-checkpoint": TINY["checkpoint_every_steps"],  # killed before writing it
            "random": random.Random().randrange(1, total)}[trial]
    root = make_tiny(tmp_path)
    killed = train_stage(root, PIPELINE_TEST_KILL_AT_STEP=step)
    assert killed.returncode == KILLED, (step, killed.stderr)
    assert not (root / "models/model.pt").exists()
    resumed = train_stage(root)
    assert resumed.returncode == 0, resumed.stderr
    # The kill comes right after optimiser step N, before that step's checkpoint is written.
    if step > TINY["checkpoint_every_steps"]:
        assert "resuming from models/checkpoints/last.pt" in resumed.stdout, (step, resumed.stdout)
    else:
        assert "starting fresh: no checkpoint" in resumed.stdout, (step, resumed.stdout)
    assert outs(root) == baseline, f"killed at step {step}"
    if trial == "mid-epoch":  # a finished checkpoint: nothing to train, same outs
        again = train_stage(root)
        assert "resuming" in again.stdout and "epoch 1/" not in again.stdout
        assert outs(root) == baseline


def test_num_workers_do_not_change_the_result(baseline, tmp_path):
    root = make_tiny(tmp_path, {"num_workers": 2})
    proc = train_stage(root)
    assert proc.returncode == 0, proc.stderr
    assert outs(root) == baseline


def test_poisoned_sample_stops_training_naming_it(tmp_path):
    root = make_tiny(tmp_path, {"checkpoint_every_steps": 1})
    proc = train_stage(root, PIPELINE_TEST_POISON="b/007.png")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "non-finite loss" in proc.stderr and "b/007.png" in proc.stderr
    assert "epoch 1, step " in proc.stderr
    record = json.loads((root / "logs/train.json").read_text())
    assert record["status"] == "failed" and "b/007.png" in record["nonfinite"]["samples"]
    bad_step = record["nonfinite"]["step"]
    assert f"step {bad_step}" in record["error"]
    assert not (root / "models/model.pt").exists()
    if bad_step > 1:  # last.pt is the last good state: the step before, all weights finite
        last = torch.load(root / "models/checkpoints/last.pt", weights_only=True)
        assert last["step"] == bad_step - 1
        assert all(torch.isfinite(v).all() for v in last["model"].values() if v.is_floating_point())


def test_lr_change_after_interruption_starts_fresh(tmp_path):
    fresh = make_tiny(tmp_path / "fresh", {"lr": 0.02})
    assert train_stage(fresh).returncode == 0
    root = make_tiny(tmp_path / "changed")
    assert train_stage(root, PIPELINE_TEST_KILL_AT_STEP=10).returncode == KILLED
    assert (root / "models/checkpoints/last.pt").exists()
    set_train(root, {**TINY, "lr": 0.02})
    proc = train_stage(root)
    assert proc.returncode == 0, proc.stderr
    assert "starting fresh, not resuming models/checkpoints/last.pt" in proc.stdout
    assert "train.lr changed (0.01 -> 0.02)" in proc.stdout
    assert outs(root) == outs(fresh)


def test_changed_data_starts_fresh_and_names_the_file(baseline, tmp_path):
    root = make_tiny(tmp_path, {"epochs": 1})
    assert train_stage(root).returncode == 0
    shard = root / "data/processed/train/targets-00001.npy"
    np.save(shard, 1 - np.load(shard), allow_pickle=False)
    proc = train_stage(root)
    assert "starting fresh" in proc.stdout
    assert "the data changed (data/processed/train/targets-00001.npy)" in proc.stdout


def test_torchrun_with_two_processes_writes_one_set_of_outs(tmp_path):
    root = make_tiny(tmp_path, {"nproc": 2, "epochs": 2})
    proc = train_stage(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 processes under torchrun" in proc.stdout
    assert sorted(p.name for p in (root / "models").rglob("*")) == [
        "best.pt", "checkpoints", "last.pt", "model.pt"]
    record = json.loads((root / "logs/train.json").read_text())
    assert record["world_size"] == 2 and record["status"] == "ok"
    acc = (root / "plots/train/plots/metrics/val/acc.tsv").read_text().splitlines()
    assert len(acc) == 1 + 2
    assert json.loads((root / "metrics/train.json").read_text())["epochs"] == 2
    shutil.rmtree(root / "data")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_equal_one_node_with_two_processes(tmp_path):
    """torchrun's c10d rendezvous with two "machines" (two local torchrun processes on
    127.0.0.1, one process each) trains the same bytes as one machine with two processes and
    the same global batch; only global rank 0 writes outs. threads: 1 in both, as torchrun
    gives each of two processes on one machine (the thread count orders CPU float sums)."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    one = make_tiny(tmp_path / "one", {"nproc": 2, "epochs": 2, "threads": 1})
    assert train_stage(one).returncode == 0
    two = make_tiny(tmp_path / "two", {"nnodes": 2, "epochs": 2, "threads": 1,
                                       "rdzv_endpoint": f"127.0.0.1:{free_port()}"})
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    nodes = [subprocess.Popen([sys.executable, "-m", "stages.train"], cwd=two, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    logs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], logs
    assert any("on each of 2 machines" in log for log in logs)
    assert outs(two) == outs(one)
    record = json.loads((two / "logs/train.json").read_text())
    assert record["world_size"] == 2 and record["threads"] == 1


def test_two_nodes_resume_with_the_checkpoint_on_one_machine(tmp_path):
    """Two "machines" in two folders: only the one holding global rank 0 writes last.pt, and
    after a kill -9 torchrun may give rank 0 to either. Every rank still resumes from the one
    checkpoint (sent to the other machine), so the result equals one uninterrupted machine with
    two processes. A machine whose data differs is named and stops."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    settings = {"epochs": 2, "threads": 1}
    one = make_tiny(tmp_path / "one", {"nproc": 2, **settings})
    assert train_stage(one).returncode == 0
    endpoint = f"127.0.0.1:{free_port()}"
    nodes = [make_tiny(tmp_path / name, {"nnodes": 2, "rdzv_endpoint": endpoint, **settings})
             for name in ("a", "b")]
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}

    def run_both(**extra):
        procs = [subprocess.Popen([sys.executable, "-m", "stages.train"], cwd=node,
                                  env={**env, **extra}, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for node in nodes]
        return [p.communicate(timeout=300)[0] for p in procs], [p.returncode for p in procs]

    logs, codes = run_both(PIPELINE_TEST_KILL_AT_STEP="5")
    assert all(code != 0 for code in codes), logs
    holders = [node for node in nodes if (node / "models/checkpoints/last.pt").exists()]
    assert len(holders) == 1, logs  # rank 0's machine alone wrote it
    logs, codes = run_both()
    assert codes == [0, 0], logs
    assert sum("resuming from models/checkpoints/last.pt" in log for log in logs) == 2, logs
    written = [node for node in nodes if (node / "models/model.pt").exists()]
    assert len(written) == 1
    assert outs(written[0]) == outs(one)

    # a machine with other data is named, not trained with
    for node in nodes:
        shutil.rmtree(node / "models", ignore_errors=True)
    shard = sorted((nodes[1] / "data/processed/train").glob("images-*.npy"))[0]
    shard.write_bytes(shard.read_bytes()[:-1] + b"\x01")
    endpoint = f"127.0.0.1:{free_port()}"
    for node in nodes:
        set_train(node, {**TINY, "nnodes": 2, "rdzv_endpoint": endpoint, **settings})
    logs, codes = run_both()
    assert all(code != 0 for code in codes), logs
    assert any("cannot train with rank 0: the data changed" in log for log in logs), logs
