"""How many CPU threads a training process may use: its share of the machine's cores.

`dvc queue start -j N` runs N experiments at once, each under its own `dvc exp queue-worker`
process (`dvc-exp-<project hash>-<n>@localhost`; the experiment's `dvc exp exec-run`, and so
this stage, are its descendants); torch's default (all cores in every process) then
oversubscribes the CPU N times over. The share is torch's default thread count (the physical
cores; 1 per process when torchrun starts several per machine) divided by the trainings running
side by side: the live queue workers of the queue this training runs in (counted from /proc, so
known the moment a job starts, and the same for every job of the queue). A training outside a
queue (`dvc repro`, `dvc exp run`, a test) counts 1 whatever else runs on the machine, so its
result never depends on another project's queue. TRAIN_CONCURRENT_JOBS in the environment
overrides the count (another scheduler, or trainings started by hand side by side).

The thread count changes the order of CPU float reductions (so the last bits of the weights):
set train.threads explicitly where a queued run must be bit-equal to a lone one.
"""
import os
from pathlib import Path

WORKER = b"queue-worker"


def cmdline(pid) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:  # gone, or no /proc
        return []


def parent(pid) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return 0
    return int(stat[stat.rindex(b")") + 2:].split()[1])  # after "pid (comm) state"


def worker_name(args: list[bytes]) -> bytes:
    """The node name after `exp queue-worker` in a command line, b"" when it is not one."""
    if WORKER in args and b"exp" in args and args.index(WORKER) + 1 < len(args):
        return args[args.index(WORKER) + 1]
    return b""


def my_queue(pid=None) -> bytes:
    """b"dvc-exp-<hash>-" of the queue worker this process descends from, b"" if none."""
    pid = pid or os.getpid()
    while pid > 1:
        name = worker_name(cmdline(pid))
        if name:
            return name.rsplit(b"-", 1)[0] + b"-"
        pid = parent(pid)
    return b""


def queue_workers(prefix: bytes = b"dvc-exp-") -> int:
    """Live queue-worker processes on this machine whose node name starts with prefix."""
    return sum(1 for entry in Path("/proc").glob("[0-9]*")
               if worker_name(cmdline(entry.name)).startswith(prefix))


def concurrent_jobs() -> int:
    env = os.environ.get("TRAIN_CONCURRENT_JOBS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    queue = my_queue()
    return max(1, queue_workers(queue)) if queue else 1


def share(threads: int, default: int) -> tuple[int, int]:
    """(threads per process, concurrent jobs): train.threads when set, else `default` (torch's
    own choice for this process: the physical cores, or 1 per process under torchrun with
    several processes per machine) divided by the concurrent jobs. Alone, that is torch's
    default unchanged, so a lone run computes exactly what it always did."""
    jobs = concurrent_jobs()
    if threads:
        return threads, jobs
    return max(1, default // jobs), jobs


def stage_threads(torch_threads: bool = True) -> int:
    """Evaluate's and export's share, like train's with train.threads 0: 0 when the stage runs
    alone (torch's and onnxruntime's own defaults, untouched, so a lone run computes exactly
    what it always did); under a queue of N jobs, torch's default threads divided by N, set
    for torch here (unless torch_threads is False: train.threads fixes torch's count) and
    returned for onnxruntime's intra-op pool. (Before, only train took its
    share: two queued experiments' evaluate and export each ran torch and onnxruntime's
    spinning pools on every core.)"""
    jobs = concurrent_jobs()
    if jobs == 1:
        return 0
    import contextlib

    import torch

    threads = max(1, (os.cpu_count() if not torch_threads else torch.get_num_threads()) // jobs)
    if torch_threads:  # not when torch runs a fixed count (train.threads, the kernel profile)
        torch.set_num_threads(threads)
        with contextlib.suppress(RuntimeError):  # once per process, before any parallel work
            torch.set_num_interop_threads(threads)
    return threads
