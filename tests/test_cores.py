"""Concurrent trainings share the cores: a live `dvc exp queue-worker` process (a real process
with that command line) counts as a job beside this one."""
import subprocess
import sys
import time

from stages.lib.cores import concurrent_jobs, queue_workers, share


def test_queue_workers_are_counted_and_divide_the_threads(monkeypatch):
    monkeypatch.delenv("TRAIN_CONCURRENT_JOBS", raising=False)
    before = queue_workers()
    # the command line of `dvc exp queue-worker dvc-exp-<hash>-N@localhost`, argv[1:] of a sleeper
    workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "exp",
                                 "queue-worker", f"dvc-exp-abc123-{n}@localhost"])
               for n in (1, 2)]
    try:
        deadline = time.monotonic() + 10
        while queue_workers() < before + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert queue_workers() == before + 2
        assert concurrent_jobs() == max(1, before + 2)
        assert share(0, 8) == (8 // (before + 2), before + 2)
        assert share(3, 8)[0] == 3  # train.threads set: used as is
    finally:
        for w in workers:
            w.kill()
            w.wait()
    monkeypatch.setenv("TRAIN_CONCURRENT_JOBS", "4")
    assert share(0, 8) == (2, 4) and share(0, 2) == (1, 4)
