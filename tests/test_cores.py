"""Concurrent trainings share the cores: a training under a `dvc exp queue-worker` process
counts the live workers of its own queue (real processes with those command lines), and a
training outside any queue counts 1 whatever queues run beside it."""
import subprocess
import sys
import time

from stages.lib.train.cores import concurrent_jobs, queue_workers, share
from tests.conftest import ROOT

PROBE = ("import subprocess, sys; print(subprocess.run([sys.executable, '-c', 'from "
         "stages.lib.train.cores import concurrent_jobs; print(concurrent_jobs())'], "
         "capture_output=True, text=True).stdout.strip())")


def worker(name, code="import time; time.sleep(60)"):
    """A process whose command line is that of `dvc exp queue-worker <name>`."""
    import os

    return subprocess.Popen([sys.executable, "-c", code, "exp", "queue-worker", name],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_queued_training_counts_its_queue_and_a_lone_one_counts_one(monkeypatch):
    monkeypatch.delenv("TRAIN_CONCURRENT_JOBS", raising=False)
    others = [worker("dvc-exp-abc123-2@localhost"), worker("dvc-exp-abc123-3@localhost"),
              worker("dvc-exp-ffffff-1@localhost")]  # two of this queue, one of another project
    try:
        deadline = time.monotonic() + 10
        while queue_workers(b"dvc-exp-abc123-") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        # the training's process descends from worker 1 of queue abc123 (via a child, as
        # `dvc exp exec-run` runs the stage): 3 workers of its queue are alive
        first = worker("dvc-exp-abc123-1@localhost", PROBE)
        assert first.communicate(timeout=60)[0].strip() == "3"
        assert concurrent_jobs() == 1  # this test process is in no queue
        assert share(0, 2) == (2, 1)  # alone: torch's default thread count, unchanged
    finally:
        for w in others:
            w.kill()
            w.wait()
    monkeypatch.setenv("TRAIN_CONCURRENT_JOBS", "4")
    assert share(0, 8) == (2, 4) and share(0, 2) == (1, 4)
    assert share(3, 8) == (3, 4)  # train.threads set: used as is
