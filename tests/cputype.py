"""The kind of CPU the committed dvc.lock's train and later outs were written on.

PyTorch's CPU kernels (oneDNN, MKL, ATen's vectorised loops) are picked per CPU, so `train`
writes other `models/model.pt` bytes on another kind of CPU (md5 ba5504af... on Intel AVX-512
Xeons, 8aeda2b1... on an AMD EPYC with AVX2, from the same commit). tests/lock_cpu.txt names
the kind that wrote the committed dvc.lock; rewrite it whenever you commit a regenerated lock:

    python -m tests.cputype > tests/lock_cpu.txt
"""
from pathlib import Path

RECORD = Path(__file__).with_name("lock_cpu.txt")


def cpu_type() -> str:
    """'<vendor> <torch CPU capability>', e.g. 'GenuineIntel AVX512' or 'AuthenticAMD AVX2'."""
    import torch

    vendor = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("vendor_id"):
                vendor = line.split(":", 1)[1].strip()
                break
    return f"{vendor} {torch.backends.cpu.get_cpu_capability()}"


def lock_cpu_type() -> str:
    return RECORD.read_text().strip()


if __name__ == "__main__":
    print(cpu_type())
