"""The train stage's process: its share of the cores, its device, deterministic algorithms,
torchrun (train.nproc processes per machine on train.nnodes machines) and the collectives
between ranks.

Under torchrun each process reads its RANK, WORLD_SIZE and LOCAL_RANK from the environment;
global rank 0 alone writes. `reduce` and `gather` are the only collectives the loop and the
checkpoints use; with one process they communicate nothing and return what they were given.

torch is imported inside the functions: a stage's --help never loads it.
"""
import contextlib
import os

import click

from stages.lib.train.determinism import set_deterministic
from stages.lib.io import StageError


def pick_device(p) -> str:
    """train.device as a torch device: auto takes the local rank's GPU when one is visible."""
    import torch

    if p.device == "cpu" or p.device == "auto" and not torch.cuda.is_available():
        return "cpu"
    if not torch.cuda.is_available():
        raise StageError(f"train.device is {p.device} but no CUDA GPU is visible to torch "
                         f"(torch {torch.__version__}, CUDA build {torch.version.cuda}); set "
                         f"train.device: cpu (or auto), or check `nvidia-smi`.")
    if p.device.startswith("cuda:"):
        index = int(p.device[5:])
        if index >= torch.cuda.device_count():
            raise StageError(f"train.device is {p.device} but torch sees "
                             f"{torch.cuda.device_count()} GPU(s) (cuda:0 to "
                             f"cuda:{torch.cuda.device_count() - 1}); fix train.device.")
        return p.device
    return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"


def set_threads(p) -> dict:
    """This process's share of the cores (stages/lib/train/cores.py): intra- and inter-op threads
    and DataLoader workers; what was chosen, for the run record."""
    import torch

    from stages.lib.train.cores import share

    threads, jobs = share(p.threads, torch.get_num_threads())
    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # set once per process, before any parallel work
        torch.set_num_interop_threads(threads)
    workers = min(p.num_workers, threads) if not p.threads else p.num_workers
    return {"threads": threads, "concurrent_jobs": jobs, "num_workers": workers}


def start_process(p) -> tuple:
    """This process's set-up before any data is read: deterministic algorithms, its share of
    the cores, its device and (under torchrun) the process group. (p with the DataLoader
    workers it was given, the cores chosen, device, rank, world)"""
    import dataclasses

    import torch

    set_deterministic(p.deterministic)
    cores = set_threads(p)
    p = dataclasses.replace(p, num_workers=cores["num_workers"])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = pick_device(p)
    if device != "cpu":
        torch.cuda.set_device(device)
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("nccl" if device != "cpu" else "gloo")
    return p, cores, device, rank, world


def trained_on(p, device) -> dict:
    """What the weights were computed with, for model.pt's metadata (then the ONNX metadata and
    the report) and the run record: the device ("cpu" on every CPU, whatever its kind: the
    kernel profile says which kernels ran; the GPU's name on CUDA), deterministic algorithms
    on or off, and the precision."""
    import torch

    name = "cpu" if device == "cpu" else torch.cuda.get_device_name(device)
    return {"device": name, "deterministic": bool(p.deterministic), "precision": p.precision}


def system_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def peak_memory_bytes(device) -> int:
    import torch

    if torch.device(device).type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def reduce(values, world: int, device, op: str = "sum", dtype=None) -> list:
    """values (numbers) combined over every rank by op ("sum" or "max"): one all_reduce of a
    tensor of dtype (torch's default float when None) on device, as floats. With one process,
    values as given."""
    if world == 1:
        return list(values)
    import torch
    import torch.distributed as dist

    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}
    tensor = torch.tensor([float(v) for v in values], dtype=dtype, device=device)
    dist.all_reduce(tensor, op=ops[op])
    return tensor.tolist()


def gather(obj, world: int):
    """Every rank's obj, in rank order (all_gather_object); None with one process."""
    if world == 1:
        return None
    import torch.distributed as dist

    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def torchrun_args(p, params_path) -> list[str]:
    """The torchrun command of this stage: one machine (--standalone) or train.nnodes machines
    meeting at train.rdzv_endpoint through the c10d rendezvous."""
    import sys

    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={p.nproc}"]
    if p.nnodes == 1:
        # --standalone picks a free rendezvous port: concurrent runs never meet
        cmd.append("--standalone")
    else:
        # every machine runs the same params, so the id is the same on each, and differs
        # between two runs with other params (they never join each other's rendezvous)
        import hashlib
        import json
        from dataclasses import asdict

        run_id = hashlib.sha256(json.dumps(asdict(p), sort_keys=True).encode()).hexdigest()[:16]
        cmd += [f"--nnodes={p.nnodes}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={p.rdzv_endpoint}", f"--rdzv-id=train-{run_id}"]
    return [*cmd, "-m", "stages.train", "--params", params_path]


def relaunch_under_torchrun(p, params_path) -> None:
    """Run the train stage in train.nproc processes (per machine) under torchrun, each in a
    private temp dir."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="train-run-") as tmp:
        click.echo(f"train: running {p.nproc} processes under torchrun"
                   + (f" on each of {p.nnodes} machines" if p.nnodes > 1 else ""))
        rc = subprocess.call(torchrun_args(p, params_path), env={**os.environ, "TMPDIR": tmp})
    if rc != 0:
        raise StageError(f"train under torchrun ({p.nproc} x {p.nnodes} processes) failed with "
                         f"exit code {rc}; the first error is printed above.")
