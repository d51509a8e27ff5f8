"""Make the wheel folder that bench/gpu_check.sh installs on a GPU machine with no package index.

    python -m bench.gpu_wheels --out wheels [--python-version 3.12] [--have have.txt] [--all]

A GPU machine in a cluster often has a Python with torch and torchvision built for its CUDA, and
no way to reach a package index. This runs on a machine that has one: it downloads, for the
target's Python and platform (manylinux x86-64), one wheel per package of requirements.lock at
its locked version, with no dependencies resolved (the lock is the resolution), leaving out:
- torch, torchvision, triton and the CUDA libraries (nvidia-*, cuda-*): the target keeps its own;
- what the check never imports (Ray, OpenVINO, S3 remotes, moto, the test and lint tools,
  transformers and peft, TensorBoard), unless --all;
- every package named in --have: the target's own `python3 -m pip list --format=freeze` (or one
  name a line), so its numpy, pandas, onnxruntime... stay as they are and the folder stays small.
A package published only as an sdist (antlr4-python3-runtime) is built into a wheel here; it
must come out pure Python (py3-none-any), or it would not install on the target.

Then, on the GPU machine: `WHEELS=wheels PYTHON=python3 bash bench/gpu_check.sh`.
"""
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
GPU_STACK = re.compile(r"^(torch|torchvision|triton|nvidia-.*|cuda-.*)$")
NOT_FOR_CHECK = {
    "ray", "openvino", "openvino-telemetry", "moto", "cfn-lint", "aws-xray-sdk", "docker",
    "py-partiql-parser", "schemathesis", "hypothesis", "hypothesis-graphql", "graphql-core",
    "ruff", "pytest", "pytest-xdist", "execnet", "iniconfig", "pluggy", "transformers",
    "tokenizers", "peft", "accelerate", "safetensors", "hf-xet", "huggingface-hub",
    "tensorboard", "tensorboard-data-server", "grpcio", "absl-py", "markdown", "werkzeug",
    "jsonschema-rs",
    # S3 remotes (dvc-s3): the check pushes nothing
    "dvc-s3", "s3fs", "aiobotocore", "boto3", "botocore", "s3transfer", "jmespath",
}
# manylinux tags pip matches one by one: every glibc from 2.17 (CentOS 7) to 2.39
PLATFORMS = (["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64"]
             + [f"manylinux_2_{n}_x86_64" for n in range(5, 40)] + ["linux_x86_64"])


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(path: Path) -> list[tuple[str, str]]:
    """(name, version) of every `name==version` line of requirements.lock."""
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out.append((name.strip(), version.strip()))
    return out


def present(path: Path | None) -> set[str]:
    """Canonical names listed in a `pip list --format=freeze` file (or one name a line)."""
    if path is None:
        return set()
    names = (re.split(r"[=<>@ ]", line.strip())[0] for line in path.read_text().splitlines())
    return {canonical(n) for n in names if n and not n.startswith("#")}


def wanted(lock, have: set[str], everything: bool) -> list[tuple[str, str]]:
    return [(n, v) for n, v in lock
            if not GPU_STACK.match(canonical(n)) and canonical(n) not in have
            and (everything or canonical(n) not in NOT_FOR_CHECK)]


def download(name: str, version: str, out: Path, python_version: str) -> str:
    """One wheel of name==version into out for the target; "" when done, else why not."""
    args = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
            "--python-version", python_version, "--implementation", "cp", "-d", str(out)]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    proc = subprocess.run([*args, f"{name}=={version}"], capture_output=True, text=True)
    if proc.returncode == 0:
        return ""
    # no wheel for the target: an sdist-only package, built here (pure Python only)
    with tempfile.TemporaryDirectory() as tmp:
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                                tmp, f"{name}=={version}"], capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if built.returncode != 0 or not wheels:
            return (proc.stderr.strip().splitlines() or ["pip download failed"])[-1]
        if not wheels[0].name.endswith("-py3-none-any.whl"):
            return f"only an sdist, and it builds a platform wheel here ({wheels[0].name})"
        wheels[0].replace(out / wheels[0].name)
    return ""


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for the wheels (created; wheels already there are kept).")
@click.option("--python-version", default="3.12", show_default=True,
              help="The target's Python, major.minor (`python3 --version` there).")
@click.option("--have", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The target's `python3 -m pip list --format=freeze`: packages it already "
                   "has are not downloaded (it keeps its own versions).")
@click.option("--all", "everything", is_flag=True,
              help="Also the packages the GPU check never imports (Ray, OpenVINO, moto, the "
                   "test tools...).")
@click.option("--lock", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=ROOT / "requirements.lock", show_default="requirements.lock",
              help="The pinned requirements to take versions from.")
def main(out, python_version, have, everything, lock):
    out.mkdir(parents=True, exist_ok=True)
    todo = wanted(locked(lock), present(have), everything)
    failed = []
    for k, (name, version) in enumerate(todo, 1):
        why = download(name, version, out, python_version)
        click.echo(f"[{k}/{len(todo)}] {name}=={version}" + (f": FAILED {why}" if why else ""))
        if why:
            failed.append(f"{name}=={version}: {why}")
    size = sum(f.stat().st_size for f in out.glob("*.whl"))
    click.echo(f"{len(list(out.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB in {out}")
    if failed:
        raise click.ClickException("no wheel for the target:\n  " + "\n  ".join(failed))


if __name__ == "__main__":
    main()
