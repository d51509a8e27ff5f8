"""How many CPU threads a training process may use: its share of the machine's cores.

`dvc queue start -j N` runs N experiments at once, each in its own `dvc exp queue-worker`
process; torch's default (all cores in every process) then oversubscribes the CPU N times over.
The share is torch's default thread count (the physical cores; 1 per process when torchrun
starts several per machine) divided by the trainings running side by side: the queue workers
alive on this machine (counted from /proc, so it is known the moment a job starts, and is the
same for every job of the queue). TRAIN_CONCURRENT_JOBS in the environment overrides the count
(another scheduler, or trainings started by hand side by side).

The thread count changes the order of CPU float reductions (so the last bits of the weights):
set train.threads explicitly where a queued run must be bit-equal to a lone one.
"""
import os
from pathlib import Path


def queue_workers() -> int:
    """Live `dvc exp queue-worker` processes on this machine (0 where /proc is missing)."""
    count = 0
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = entry.read_bytes().split(b"\0")
        except OSError:  # the process ended while we looked
            continue
        if b"queue-worker" in args and b"exp" in args:
            count += 1
    return count


def concurrent_jobs() -> int:
    env = os.environ.get("TRAIN_CONCURRENT_JOBS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, queue_workers())


def share(threads: int, default: int) -> tuple[int, int]:
    """(threads per process, concurrent jobs): train.threads when set, else `default` (torch's
    own choice for this process: the physical cores, or 1 per process under torchrun with
    several processes per machine) divided by the concurrent jobs. Alone, that is torch's
    default unchanged, so a lone run computes exactly what it always did."""
    jobs = concurrent_jobs()
    if threads:
        return threads, jobs
    return max(1, default // jobs), jobs
