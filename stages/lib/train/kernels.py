"""The kernel profile (train.kernels): which float kernels torch runs, so that the same inputs
give the same bits on every x86-64 CPU, whatever its kind or core count.

torch picks its CPU kernels per machine: ATen's vectorised loops at the widest ISA the CPU
has (AVX2 or AVX-512), oneDNN's JIT convolutions likewise, and MKL's GEMM on a code branch
chosen by CPU vendor and ISA. Each choice changes the order of float operations, and so the
last bits of every weight after a few steps. The same commit has trained three different
`models/model.pt` on three kinds of CPU here.

`portable` (the default) pins every one of those choices before torch loads:
- ATEN_CPU_CAPABILITY=avx2: ATen's AVX2 loops (8 float lanes, FMA) on every CPU that has AVX2;
- ONEDNN_MAX_CPU_ISA=AVX2 and ONEDNN_DEFAULT_FPMATH_MODE=STRICT: oneDNN's AVX2 kernels, in
  float32 (never bf16 or tf32 behind the caller's back, on AMX or AVX512-BF16 CPUs);
- MKL_CBWR=COMPATIBLE,STRICT: MKL's conditional-numerical-reproducibility branch that Intel
  promises gives the same results on Intel and non-Intel CPUs; STRICT makes its GEMM
  independent of the thread count too;
- OMP_DYNAMIC and MKL_DYNAMIC off, NNPACK off, and the outer settings that would pick other
  kernels (MKL_ENABLE_INSTRUCTIONS, *_CPU_ISA_HINTS, ...) removed;
- a fixed number of threads (train.threads, a param in dvc.lock), never the machine's cores.
Under it every CPU with AVX2 and FMA (Intel since Haswell, AMD since Zen) writes the same
bytes. A CPU without AVX2, and non-x86 CPUs (ARM) or GPUs, are other worlds: there the stage
runs `native` and says so, and `tools.verify` reports the machine as unsupported.

`native` leaves torch's own choices alone: its fastest kernels, with model bytes that belong to
the kind of CPU (and, with train.threads 0, the core count) that wrote them.

The environment must be set before torch is imported: oneDNN and MKL read it once, when they
start. So stages call `use()` before their first torch import, and it refuses to run when
torch was already imported under other settings.
"""
import os
import platform
import sys
from pathlib import Path

PROFILES = ("portable", "native")
PORTABLE = "portable"
NATIVE = "native"
# what the portable profile sets, before torch loads
PORTABLE_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "DNNL_MAX_CPU_ISA": "AVX2",
    "ONEDNN_DEFAULT_FPMATH_MODE": "STRICT",
    "DNNL_DEFAULT_FPMATH_MODE": "STRICT",
    "MKL_CBWR": "COMPATIBLE,STRICT",
    "MKL_DYNAMIC": "FALSE",
    "OMP_DYNAMIC": "FALSE",
}
# outer settings that would choose other kernels or thread counts: removed under portable
CLEARED = ("MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE", "ONEDNN_CPU_ISA_HINTS",
           "DNNL_CPU_ISA_HINTS", "MKL_NUM_THREADS", "MKL_DOMAIN_NUM_THREADS", "OMP_NUM_THREADS",
           "OMP_THREAD_LIMIT")
NEEDS = ("avx2", "fma")  # /proc/cpuinfo flags the portable kernels run on


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_name() -> str:
    """'<model name> (<vendor>)' of this machine's CPU, for messages and run records."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    return f"{name} ({fields.get('vendor_id', platform.machine())})"


def unsupported() -> str:
    """Why this machine cannot run the portable kernels, or "" when it can."""
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        return f"the portable kernels are x86-64 AVX2 kernels; this machine is {machine}"
    missing = [f for f in NEEDS if f not in cpu_flags()]
    if missing:
        return (f"the portable kernels need AVX2 and FMA; this CPU ({cpu_name()}) lacks "
                f"{' and '.join(m.upper() for m in missing)}")
    return ""


def resolve(profile: str) -> tuple[str, str]:
    """(the profile this machine runs, why it differs from `profile`, or "")."""
    if profile == PORTABLE:
        why = unsupported()
        if why:
            return NATIVE, why
    return profile, ""


def portable_env(environ) -> dict:
    """environ with the portable settings applied (a new dict)."""
    env = {k: v for k, v in environ.items() if k not in CLEARED}
    env.update(PORTABLE_ENV)
    return env


def set_environment(profile: str) -> None:
    """Apply the profile's environment to this process (before torch loads)."""
    if profile != PORTABLE:
        return
    for key in CLEARED:
        os.environ.pop(key, None)
    os.environ.update(PORTABLE_ENV)


def use(profile: str, threads: int, echo=None) -> dict:
    """Run this process's torch under `profile` with `threads` intra-op threads (0: leave
    torch's count alone, `native` only). Call before importing torch. Returns what applies,
    for model.pt, the ONNX metadata and the run record: {"kernels", "threads", "capability",
    "fallback"}."""
    from stages.lib.io import StageError

    applied, why = resolve(profile)
    if why and echo:
        echo(f"kernels: train.kernels is portable, but {why}: running native kernels, so the "
             f"outs will differ from a lock written under portable")
    if "torch" in sys.modules and applied == PORTABLE:
        wrong = {k: os.environ.get(k) for k, v in PORTABLE_ENV.items()
                 if os.environ.get(k) != v}
        if wrong:
            raise StageError(
                "kernels: torch was imported before the portable kernel profile was set "
                f"({', '.join(f'{k}={v}' for k, v in sorted(wrong.items()))}); call "
                "stages.lib.train.kernels.use() before the first `import torch`.")
    set_environment(applied)
    from stages.lib.train.cores import concurrent_jobs

    if threads and concurrent_jobs() > 1:  # fixed threads on a shared machine: OpenMP's
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # spinning would steal the others' cores
    import contextlib

    import torch

    if applied == PORTABLE:
        torch.backends.nnpack.set_flags(False)  # NNPACK picks its own ISA per CPU
        torch.set_float32_matmul_precision("highest")
        capability = torch.backends.cpu.get_cpu_capability()
        if capability != "AVX2":
            raise StageError(f"kernels: the portable profile asked ATen for AVX2 kernels, but "
                             f"it runs {capability}; torch was imported too early.")
    if threads:
        torch.set_num_threads(threads)
        with contextlib.suppress(RuntimeError):  # once per process, before parallel work
            torch.set_num_interop_threads(threads)
    return {"kernels": applied, "threads": torch.get_num_threads(), "threads_fixed": bool(threads),
            "capability": torch.backends.cpu.get_cpu_capability(), "fallback": why}


def use_trained(trained, echo=None) -> dict:
    """use() with the train section's profile and threads (trained: its typed params, or a
    view of train.kernels and train.threads): evaluate and export run the model under the
    kernels that trained it."""
    return use(trained.kernels, trained.threads, echo)
