"""Check that this machine can run the pipeline and reproduce its results, and say how to fix it.

Not a DVC stage: a tool to run on a new machine (or when something fails) from the project root.
Each check yields findings: OK, WARN (the run works but may not reproduce the committed bits,
or something is worth knowing) or FAIL (blocks a run: a stage would crash, the outs do not fit
on disk, or `dvc pull`/`dvc push` cannot reach the remote). Every WARN and FAIL carries the
command that fixes it. The exit code is 1 when anything FAILs, else 0.
"""
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click

OK, WARN, FAIL = "OK", "WARN", "FAIL"
LOCK_FIX = "pip install -r requirements.lock"


@dataclass
class Finding:
    level: str
    check: str
    message: str
    fix: str = ""


def canonical(name: str) -> str:
    """PEP 503 name: `Foo_Bar.baz` and `foo-bar-baz` are the same package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path) -> dict[str, str]:
    """{canonical name: version} of every `name==version` line of a requirements lock file."""
    pins = {}
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            name = name.split("[", 1)[0].split(";", 1)[0].strip()
            pins[canonical(name)] = version.split(";", 1)[0].strip()
    return pins


def installed_packages() -> dict[str, str]:
    """{canonical name: version} of every distribution importable by this interpreter."""
    from importlib import metadata

    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonical(name), dist.version)
    return found


def lock_findings(lock_path) -> list[Finding]:
    """Every package of the lock file that is missing (FAIL) or at another version (WARN)."""
    lock_path = Path(lock_path)
    lock_fix = f"pip install -r {lock_path}"
    if not lock_path.is_file():
        return [Finding(FAIL, "packages", f"{lock_path} not found",
                        "run from the project root, or pass --lock PATH")]
    pins, have = read_lock(lock_path), installed_packages()
    findings = []
    for name, version in sorted(pins.items()):
        if name not in have:
            findings.append(Finding(FAIL, "packages", f"{name}=={version} is not installed",
                                    lock_fix))
        elif have[name] != version:
            findings.append(Finding(WARN, "packages", f"{name} {have[name]} is installed, "
                                    f"{lock_path.name} pins {version}", lock_fix))
    if not findings:
        findings.append(Finding(OK, "packages", f"all {len(pins)} packages match {lock_path}"))
    return findings


def python_findings() -> list[Finding]:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info[:2] != (3, 11):
        return [Finding(FAIL, "python", f"Python {version}; the lock file is for Python 3.11",
                        "python3.11 -m venv .venv && . .venv/bin/activate && "
                        "pip install -r requirements.lock -e .")]
    return [Finding(OK, "python", f"Python {version} ({sys.executable})")]


def torch_findings() -> list[Finding]:
    try:
        import torch
    except ImportError:
        return [Finding(FAIL, "torch", "torch cannot be imported", LOCK_FIX)]
    cuda = torch.version.cuda or "none (CPU-only build)"
    findings = [Finding(OK, "torch", f"torch {torch.__version__}, CUDA build {cuda}, "
                        f"{torch.get_num_threads()} CPU threads")]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            findings.append(Finding(OK, "gpu", f"cuda:{i} {props.name}, "
                                    f"{props.total_memory / 2**30:.1f} GiB"))
    else:
        findings.append(Finding(OK, "gpu", "no GPU visible: the pipeline runs on CPU"))
    return findings


def kernel_findings(root) -> list[Finding]:
    """Whether this CPU runs the kernel profile dvc.lock was written under (train.kernels)."""
    from stages.lib.train.kernels import PORTABLE, cpu_name, unsupported
    from stages.lib.params import load

    try:
        profile = load("train", Path(root) / "params.yaml").kernels
    except Exception as exc:  # a params problem is every stage's first error; name it here too
        return [Finding(WARN, "kernels", f"params.yaml: {exc}", "fix params.yaml")]
    if profile != PORTABLE:
        return [Finding(WARN, "kernels", "train.kernels is native: the outs from train on "
                        "reproduce dvc.lock only on the kind of CPU that wrote it",
                        "set train.kernels: portable (the same bytes on any x86-64 AVX2 CPU)")]
    why = unsupported()
    if why:
        return [Finding(WARN, "kernels", f"unsupported CPU for train.kernels portable: {why}; "
                        f"the stages run native kernels, so the outs from train on will not "
                        f"match a lock written under portable",
                        "run on an x86-64 machine with AVX2 and FMA to reproduce dvc.lock")]
    return [Finding(OK, "kernels", f"train.kernels portable on {cpu_name()} (AVX2, FMA): "
                    f"every out of dvc.lock reproduces bit for bit")]


def outs_size(root) -> int:
    """Bytes of every out recorded in dvc.lock."""
    import yaml

    lock = Path(root) / "dvc.lock"
    if not lock.is_file():
        return 0
    stages = (yaml.safe_load(lock.read_text()) or {}).get("stages", {})
    return sum(out.get("size", 0) for entry in stages.values() for out in entry.get("outs", []))


def disk_findings(root) -> list[Finding]:
    # The workspace copy and the DVC cache copy of every out (DVC copies by default).
    need, free = 2 * outs_size(root), shutil.disk_usage(root).free
    if free < need:
        return [Finding(FAIL, "disk", f"{free / 2**20:.0f} MiB free, the outs in dvc.lock need "
                        f"{need / 2**20:.0f} MiB (workspace + DVC cache)",
                        "free space here, or move the cache: dvc cache dir /a/bigger/disk")]
    return [Finding(OK, "disk", f"{free / 2**30:.1f} GiB free, the outs need "
                    f"{need / 2**20:.1f} MiB (workspace + DVC cache)")]


def dvc_config(root) -> dict:
    """DVC's merged config (system, global, repo and .dvc/config.local)."""
    from dvc.config import Config

    dvc_dir = str(Path(root).resolve() / ".dvc")
    return Config(dvc_dir=dvc_dir, local_dvc_dir=dvc_dir)


def remote_findings(root, name=None, timeout: float = 5.0) -> list[Finding]:
    """Is the DVC remote (the default one unless named) configured, reachable and usable?"""
    config = dvc_config(root)
    name = name or config.get("core", {}).get("remote")
    remotes = config.get("remote", {})
    if not name:
        return [Finding(WARN, "remote", "no default DVC remote: `dvc push`/`dvc pull` have "
                        "nowhere to go", "dvc remote add -d storage s3://bucket/path  "
                        "(or a directory: dvc remote add -d storage /mnt/shared/dvc)")]
    if name not in remotes:
        return [Finding(FAIL, "remote", f"DVC remote '{name}' is not configured",
                        f"dvc remote add {name} URL   (or dvc remote list)")]
    conf = dict(remotes[name])
    url = conf.get("url", "")
    if url.startswith("s3://"):
        return s3_findings(name, conf, timeout)
    if "://" not in url:
        return directory_findings(root, name, url)
    return [Finding(OK, "remote", f"'{name}' ({url}): not checked (only S3 and directory "
                    "remotes are); try `dvc push`")]


def directory_findings(root, name, url) -> list[Finding]:
    path = Path(root) / ".dvc" / url if not Path(url).is_absolute() else Path(url)
    if not path.is_dir():
        return [Finding(FAIL, "remote", f"'{name}': directory {url} does not exist",
                        f"mkdir -p {url}   (or point the remote elsewhere: "
                        f"dvc remote modify {name} url /path)")]
    if not os.access(path, os.W_OK):
        return [Finding(WARN, "remote", f"'{name}': directory {url} is read-only for you: "
                        "`dvc pull` works, `dvc push` does not", f"chmod u+w {url}")]
    return [Finding(OK, "remote", f"'{name}': directory {url} is writable")]


def s3_credentials(conf) -> str:
    """Where the S3 credentials come from, or "" when there are none."""
    if conf.get("access_key_id") and conf.get("secret_access_key"):
        return "the DVC remote config"
    if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        return "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
    import botocore.session

    # Never let botocore wait on the EC2 metadata endpoint (a timeout off EC2).
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    session = botocore.session.Session(profile=conf.get("profile"))
    if conf.get("credentialpath"):
        session.set_config_variable("credentials_file", conf["credentialpath"])
    try:
        creds = session.get_credentials()
    except Exception:  # a broken profile is as good as no credentials here
        creds = None
    return f"botocore ({creds.method})" if creds else ""


def s3_findings(name, conf, timeout) -> list[Finding]:
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

    url, endpoint = conf["url"], conf.get("endpointurl")
    bucket = url[len("s3://"):].split("/", 1)[0]
    where = f"'{name}' ({url}{' at ' + endpoint if endpoint else ''})"
    creds_fix = (f"dvc remote modify --local {name} access_key_id KEY && "
                 f"dvc remote modify --local {name} secret_access_key SECRET   "
                 "(or export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...)")
    source = s3_credentials(conf)
    if not source:
        return [Finding(FAIL, "remote", f"{where}: no S3 credentials found", creds_fix)]
    from tools.doctor_objects import s3_client

    client = s3_client(conf, timeout)
    endpoint_fix = f"dvc remote modify {name} endpointurl http://HOST:PORT"
    try:
        client.head_bucket(Bucket=bucket)
    except (EndpointConnectionError, ConnectionError) as exc:
        return [Finding(FAIL, "remote", f"{where}: cannot connect ({type(exc).__name__}); is "
                        "the endpointurl right and the server up?", endpoint_fix)]
    except NoCredentialsError:
        return [Finding(FAIL, "remote", f"{where}: no S3 credentials found", creds_fix)]
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchBucket"):
            return [Finding(FAIL, "remote", f"{where}: no bucket '{bucket}' there (or the "
                            "endpoint is not an S3 server)", f"create the bucket, or fix the "
                            f"URL: dvc remote modify {name} url s3://BUCKET/PATH (or "
                            f"endpointurl)")]
        if code in ("403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied"):
            return [Finding(FAIL, "remote", f"{where}: credentials from {source} were refused "
                            f"({code})", creds_fix)]
        return [Finding(FAIL, "remote", f"{where}: {exc}", endpoint_fix)]
    except Exception as exc:  # timeouts, TLS, malformed endpoint: botocore has many classes
        return [Finding(FAIL, "remote", f"{where}: {type(exc).__name__}: {exc}", endpoint_fix)]
    return [Finding(OK, "remote", f"{where}: reachable, bucket found, credentials from {source}")]


def git_findings(root) -> list[Finding]:
    proc = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain"], cwd=root,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return [Finding(WARN, "git", "not a git repository: results cannot be traced to a "
                        "commit", "git clone the project instead of copying it")]
    changed = proc.stdout.splitlines()
    if changed:
        shown = ", ".join(line[3:] for line in changed[:5]) + (" ..." if len(changed) > 5 else "")
        return [Finding(WARN, "git", f"{len(changed)} uncommitted change(s): {shown}; a run "
                        "now is not traceable to a commit", "git add -A && git commit "
                        "(or git stash)")]
    return [Finding(OK, "git", "working tree clean")]


def source_findings(root) -> list[Finding]:
    """Every entry under data.source that DVC's own walk trips on before any stage runs
    (tools/source_check.py): FIFOs, sockets and devices (it blocks forever on a FIFO), symlink
    loops and symlinks to nothing, folders and files this user cannot read. One FAIL line per
    kind, naming the paths and the fix; a path listed in .dvcignore (or under a listed folder)
    is skipped by DVC, so it is fine."""
    from stages.lib.params import load
    from stages.lib.show import some
    from tools.source_check import KINDS, blocking_entries, ignored

    try:
        source = Path(root) / load("data", Path(root) / "params.yaml").source
    except Exception:  # noqa: BLE001 - no params.yaml here: nothing to check
        return []
    if not source.is_dir():
        return []
    try:
        entries = blocking_entries(source)
    except OSError as exc:  # an I/O error: ingest names it itself
        return [Finding(WARN, "source", f"{source}: cannot walk it ({exc.strerror})",
                        "python -m stages.ingest   (to see which entry)")]
    ignore_file = Path(root) / ".dvcignore"
    patterns = set(ignore_file.read_text().split()) if ignore_file.exists() else set()
    by_kind: dict[str, list[str]] = {}
    for rel, kind in entries:
        path = os.path.normpath(os.path.relpath(source / rel, root))
        if not ignored(path, patterns):
            by_kind.setdefault(kind, []).append(path)
    if not by_kind:
        return [Finding(OK, "source", f"{os.path.relpath(source, root)}: no FIFO, socket, "
                                      f"device, symlink loop or unreadable entry")]
    findings = []
    for kind, paths in by_kind.items():
        what, effect, fix = KINDS[kind]
        shown = some(paths)  # escaped: a name that is not UTF-8 shows its bytes as \xNN
        findings.append(Finding(FAIL, "source", f"data.source holds {len(paths)} {what}: "
                                f"{shown}; {effect}", fix))
    return findings


def dvc_status_findings(root) -> list[Finding]:
    from tools.project import dvc

    proc = dvc(root, "status", check=False)
    text = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:  # DVC's error line, not its "Having any troubles?" banner
        errors = [line for line in text.splitlines() if line.startswith("ERROR")]
        return [Finding(FAIL, "dvc status", (errors or text.splitlines() or ["failed"])[-1],
                        "dvc doctor   (DVC's own environment report)")]
    if "up to date" in text:
        return [Finding(OK, "dvc status", "pipeline up to date with dvc.lock")]
    changed = sorted(set(re.findall(r"^(\w[\w-]*):", text, flags=re.M)))
    return [Finding(WARN, "dvc status", f"not up to date: {', '.join(changed) or text[:200]}",
                    "dvc pull   (get the committed outs), then dvc repro")]


def remote_sync_findings(root, name=None) -> list[Finding]:
    """Are this commit's outs on the DVC remote (`dvc status -c`), each object with the bytes
    its name says (tools/doctor_objects.py)? Another machine can only `dvc pull` a commit whose
    outs were pushed (older commits need `dvc push --all-commits`); a corrupt object is a FAIL
    naming its place on the remote, a missing one a WARN."""
    import json

    from tools.project import dvc

    config = dvc_config(root)
    remote = name or config.get("core", {}).get("remote")
    conf = dict(config.get("remote", {}).get(remote, {}))
    # The objects first: on a directory remote, `dvc status -c` deletes an object whose bytes
    # do not match its name (then it is "missing", and the evidence is gone).
    try:
        from tools.doctor_objects import check_objects

        problems = check_objects(root, conf)
    except Exception as exc:  # noqa: BLE001 - `dvc status -c` below still answers
        problems = {}
        findings = [Finding(WARN, "remote sync", f"could not look at the remote's objects: "
                            f"{type(exc).__name__}: {exc}", "dvc status -c   (to see why)")]
    else:
        findings = corrupt_findings(remote, conf, problems)
    args = ["-r", name] if name else []
    proc = dvc(root, "status", "-c", "--json", *args, check=False)
    try:
        status = json.loads(proc.stdout or "{}")
    except json.JSONDecodeError:
        status = None
    if proc.returncode != 0 or not isinstance(status, dict):
        text = (proc.stdout + proc.stderr).strip()
        return findings + [Finding(WARN, "remote sync", "could not compare the cache with the "
                                   "remote: " + (text.splitlines()[-1] if text else
                                                 "dvc status -c failed"),
                                   "dvc status -c   (to see why)")]
    corrupt = {out for out, p in problems.items() if p["corrupt"]}
    outs = lock_outs(root)

    def out_of(path):
        return next((o for o in outs if path == o or path.startswith(o + "/")), path)

    absent = sorted(p for p, state in status.items()
                    if state in ("new", "missing") and out_of(p) not in corrupt)
    if not absent:
        if not findings:
            findings.append(Finding(OK, "remote sync", "every out of this commit is on the "
                                    "remote, each object with the md5 it is named by"))
        return findings
    named = sorted({out_of(p) for p in absent})
    shown = ", ".join(named[:5]) + (" ..." if len(named) > 5 else "")
    where = [problems[o]["missing"][0][1] for o in named if problems.get(o, {}).get("missing")]
    if where:
        shown += f" (missing: no object at {where[0]}{' ...' if len(where) > 1 else ''})"
    unpushable = sum(status[p] == "missing" for p in absent)
    extra = (f" ({unpushable} are not in this machine's cache either: push them from the "
             f"machine that made them)" if unpushable else "")
    return findings + [Finding(
        WARN, "remote sync", f"{len(absent)} file(s) of this commit's outs are not on the "
        f"remote: {shown}{extra}; another machine cannot `dvc pull` them",
        "dvc push   (this commit; older ones: dvc push --all-commits)")]


def corrupt_findings(name, conf, problems: dict) -> list[Finding]:
    """One FAIL per out whose object on the remote has other bytes than its name says."""
    findings = []
    s3 = str(conf.get("url", "")).startswith("s3://")
    for out, p in sorted(problems.items()):
        if not p["corrupt"]:
            continue
        md5, where, found = p["corrupt"][0]
        more = f" (and {len(p['corrupt']) - 1} more of its files)" if len(p["corrupt"]) > 1 \
            else ""
        delete = (f"first delete the bad object ({'aws s3 rm' if s3 else 'rm -f'} {where}: "
                  f"`dvc push` skips an object that exists), then ")
        if md5.endswith(".dir"):  # DVC never checks a folder's listing against its name
            effect = ("`dvc pull` of it exits 0 and installs the files the bad listing names, "
                      "verify = true or not")
        else:
            effect = ("`dvc pull` of it fails (\"Checkout failed\")"
                      + ("" if conf.get("verify") else " or installs the bad bytes"))
        findings.append(Finding(
            FAIL, "remote sync", f"{out}: the remote's copy is corrupt: {where} has md5 "
            f"{found}, dvc.lock names {md5.removesuffix('.dir')}{more}; {effect}",
            f"{delete}dvc push -r {name} from a machine that has the good copy, or rebuild it "
            f"(dvc repro) and dvc push -r {name}"))
    return findings


def plots_findings(root) -> list[Finding]:
    """The offline page template of `dvc plots` (tools/plots_template.py)."""
    from tools.plots_template import findings

    return [Finding(level, "plots", message, fix) for level, message, fix in findings(root)]


def lock_outs(root) -> list[str]:
    """Every out path in dvc.lock, longest first (so the closest one names a file)."""
    import yaml

    path = Path(root) / "dvc.lock"
    if not path.is_file():
        return []
    lock = yaml.safe_load(path.read_text()) or {}
    outs = [o["path"] for st in lock.get("stages", {}).values() for o in st.get("outs", [])]
    return sorted(outs, key=len, reverse=True)


@click.command()
@click.option("--lock", "lock_path", default="requirements.lock", show_default=True,
              type=click.Path(dir_okay=False), help="Lock file to compare the installed "
              "packages with.")
@click.option("--remote", default=None, help="DVC remote to check (default: the default remote).")
@click.option("--timeout", default=5.0, show_default=True,
              help="Seconds to wait for the remote to answer before calling it unreachable.")
def main(lock_path, remote, timeout):
    """Check Python, packages (against the lock file), torch/CUDA and GPUs, the CPU against
    the kernel profile (train.kernels portable needs x86-64 with AVX2), free disk, the DVC
    remote (reachable, credentials), the git tree, data.source (no FIFO, socket, device,
    symlink loop, symlink to nothing or unreadable entry, on which DVC's walk blocks or fails
    before ingest runs), `dvc status` and whether this commit's outs are on the remote
    (`dvc status -c`); print each problem with the command that fixes it.

    Exit code 1 when something blocks a run (FAIL: a missing package, the wrong Python, too
    little disk, an unreachable or unauthorised remote, a FIFO, a symlink loop or an unreadable
    folder under data.source); WARN lines
    (another package version, uncommitted changes, a stale pipeline) do not block but may stop
    results matching dvc.lock.
    """
    root = Path.cwd()
    checks = [python_findings, lambda: lock_findings(lock_path), torch_findings,
              lambda: kernel_findings(root),
              lambda: disk_findings(root), lambda: remote_findings(root, remote, timeout),
              lambda: git_findings(root), lambda: plots_findings(root),
              lambda: source_findings(root),
              lambda: dvc_status_findings(root), lambda: remote_sync_findings(root, remote)]
    findings = []
    for check in checks:
        if check in checks[-2:] and any(f.check == "source" and f.level == FAIL
                                        for f in findings):
            continue  # `dvc status` would block on a FIFO, or fail with DVC's banner
        if check is checks[-1] and not any(f.check == "remote" and f.level == OK
                                           for f in findings):
            continue  # no reachable remote: nothing to compare with
        for f in check():
            findings.append(f)
            click.echo(f"{f.level:4}  {f.check:10}  {f.message}")
            if f.fix:
                click.echo(f"{'':4}  {'':10}  fix: {f.fix}")
    failed = [f for f in findings if f.level == FAIL]
    warned = [f for f in findings if f.level == WARN]
    click.echo(f"doctor: {len(failed)} blocking problem(s), {len(warned)} warning(s)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
