"""data.source on the default DVC remote (prepare.ray_inputs: remote, issue 31): where a Ray
task finds each of its files the way `dvc push` stored them (files/md5/<2>/<30> under the
remote's URL), and the files themselves, opened by path.

- remote_spec: the driver's side: the remote's URL and endpoint, and data.source's .dir hash
  (from dvc.lock or <source>.dvc). Credentials never travel: each node uses its own.
- RemoteTree: a task's side: `tree / "cat/1.png"` is that file's bytes, read from S3.

boto3 and dvc are imported only when used: a local prepare never loads them.
"""
from pathlib import Path

from stages.lib.io import StageError


def remote_spec(source: Path) -> tuple:
    """prepare.ray_inputs: remote: ("s3", the default DVC remote's URL, its endpointurl, the
    .dir hash of data.source in dvc.lock or <source>.dvc, data.source's absolute path): what a
    task needs to find each file the way `dvc push` stored it (files/md5/<2>/<30>); the path
    is for what a task's encoder reads itself (segmentation's masks). Credentials are not
    sent: each node uses its own (environment, config file or instance role, as boto3 finds
    them)."""
    import yaml
    from dvc.repo import Repo

    def outs():
        lock = Path("dvc.lock")
        if lock.exists():
            for stage in (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).values():
                yield from stage.get("outs", [])
        tracked = Path(f"{source}.dvc")
        if tracked.exists():
            yield from (yaml.safe_load(tracked.read_text()) or {}).get("outs", [])

    want = source.resolve()
    digest = next((o.get("md5", "") for o in outs()
                   if Path(o.get("path", "")).resolve() == want
                   and str(o.get("md5", "")).endswith(".dir")), "")
    if not digest:
        raise StageError(f"prepare.ray_inputs: remote: {source} is not a folder DVC tracks (no "
                         f"entry in dvc.lock or {source}.dvc): track it and `dvc push` it, or "
                         f"set prepare.ray_inputs to path (a shared filesystem)")
    with Repo(".") as repo:
        name = repo.config.get("core", {}).get("remote")
        remote = repo.config.get("remote", {}).get(name or "", {})
    url = str(remote.get("url", ""))
    if not url.startswith("s3://"):
        raise StageError(f"prepare.ray_inputs: remote needs a default DVC remote on S3 (`dvc "
                         f"remote add -d NAME s3://BUCKET/PATH`); the default is "
                         f"{url or 'not set'}")
    return ("s3", url, remote.get("endpointurl") or "", digest, str(want))


class RemoteTree:
    """data.source's files on the DVC remote's S3, opened by path (`tree / "cat/1.png"`: the
    file's bytes, a file object), found through data.source's .dir listing (fetched once)."""

    def __init__(self, url: str, endpoint: str, digest: str):
        import json

        import boto3

        self.url = url
        self.bucket, _, prefix = url.removeprefix("s3://").partition("/")
        self.prefix = prefix.strip("/")
        self.s3 = boto3.client("s3", endpoint_url=endpoint or None)
        self.files = {e["relpath"]: e["md5"] for e in json.loads(self.read(digest))}

    def read(self, digest: str) -> bytes:
        key = "/".join(p for p in (self.prefix, "files", "md5", digest[:2], digest[2:]) if p)
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self.s3.exceptions.NoSuchKey:
            raise FileNotFoundError(2, "not on the DVC remote (dvc push it)",
                                    f"{self.url}/{key}") from None

    def __truediv__(self, path):
        import errno
        import io

        digest = self.files.get(str(path))
        if digest is None:
            raise FileNotFoundError(errno.ENOENT, "not in data.source as DVC tracks it",
                                    f"{self.url}: {path}")
        return io.BytesIO(self.read(digest))

    def __str__(self):
        return self.url
