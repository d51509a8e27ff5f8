"""tools.doctor's look at the objects themselves on the DVC remote (issue 41, item 12).

`dvc status -c` says an out is "not on the remote" both when its object is absent and when the
object is there with other bytes (a directory remote: DVC hashes it and calls it missing; S3:
DVC trusts that it exists, and `dvc pull` then either installs the wrong bytes, or with
`verify = true` refuses with "Checkout failed... Is your cache up to date?"). Here each object
dvc.lock and the .dvc files name (files/md5/<2>/<30> under the remote's URL; a folder's .dir
listing and every file in it) is looked up on the remote, and its md5 compared with the name:

- absent: missing (push it from the machine that has it);
- present with another md5: corrupt (push the good copy over it, or rebuild and push).

A directory remote's objects are read and hashed; an S3 object's single-part ETag is its md5
(no download), a multipart one is downloaded and hashed.
"""
import hashlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHUNK = 1 << 20


def object_key(md5: str) -> str:
    return f"files/md5/{md5[:2]}/{md5[2:]}"


def md5_of(stream) -> str:
    """md5 (hex) of a binary stream (a file, an S3 body), read CHUNK bytes at a time."""
    digest = hashlib.md5()
    for chunk in iter(lambda: stream.read(CHUNK), b""):
        digest.update(chunk)
    return digest.hexdigest()


def declared_outs(root) -> list[tuple[str, str]]:
    """(out path, md5) of every out in dvc.lock and in the project's .dvc files, sorted."""
    import subprocess

    import yaml

    root = Path(root)
    outs = []
    lock = root / "dvc.lock"
    if lock.is_file():
        for stage in (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).values():
            outs += [(o["path"], o["md5"]) for o in stage.get("outs", []) if o.get("md5")]
    listed = subprocess.run(["git", "ls-files", "-z", "*.dvc"], cwd=root, capture_output=True,
                            text=True).stdout.split("\0")
    for rel in filter(None, listed):
        tracked = yaml.safe_load((root / rel).read_text()) or {}
        folder = Path(rel).parent
        outs += [((folder / o["path"]).as_posix(), o["md5"]) for o in tracked.get("outs", [])
                 if o.get("md5")]
    return sorted(set(outs))


class Remote:
    """The remote's objects: location(md5) for messages, check(md5) -> None (as named),
    "missing", or the md5 of the bytes found; read(md5) -> bytes."""

    def __init__(self, root, conf: dict, timeout: float):
        url = conf["url"]
        self.url = url.rstrip("/")
        if url.startswith("s3://"):

            self.client = s3_client(conf, timeout)
            self.bucket, _, prefix = url[len("s3://"):].partition("/")
            self.prefix = prefix.strip("/")
            self.base = None
        else:
            self.client = None
            self.base = Path(url) if Path(url).is_absolute() else Path(root) / ".dvc" / url

    def key(self, md5: str) -> str:
        return "/".join(p for p in (self.prefix, object_key(md5)) if p)

    def location(self, md5: str) -> str:
        if self.client is None:
            return str(self.base / object_key(md5))
        return f"s3://{self.bucket}/{self.key(md5)}"

    def check(self, md5: str):
        want = md5.removesuffix(".dir")
        if self.client is None:
            path = self.base / object_key(md5)
            if not path.is_file():
                return "missing"
            with path.open("rb") as f:
                got = md5_of(f)
            return None if got == want else got
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.key(md5))
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code", "")) in ("404", "NoSuchKey",
                                                                       "NotFound"):
                return "missing"
            raise
        etag = head.get("ETag", "").strip('"')
        if "-" in etag:  # multipart upload: the ETag is not the md5 of the bytes
            body = self.client.get_object(Bucket=self.bucket, Key=self.key(md5))["Body"]
            etag = md5_of(body)
        return None if etag == want else etag

    def read(self, md5: str) -> bytes:
        if self.client is None:
            return (self.base / object_key(md5)).read_bytes()
        return self.client.get_object(Bucket=self.bucket, Key=self.key(md5))["Body"].read()


def listing(root, remote: Remote, md5: str) -> list[dict] | None:
    """A folder's .dir listing from this machine's cache, else from the remote; None when
    neither has a readable one."""
    import json

    local = Path(root) / ".dvc/cache" / object_key(md5)
    try:
        data = local.read_bytes() if local.is_file() else remote.read(md5)
        if hashlib.md5(data).hexdigest() != md5.removesuffix(".dir"):
            return None
        return json.loads(data)
    except Exception:  # absent or unreadable: the listing's own check names it
        return None


def check_objects(root, conf: dict, timeout: float = 5.0) -> dict[str, dict]:
    """{out path: {"missing": [(md5, location)], "corrupt": [(md5, location, found md5)]}} for
    the outs with a missing or corrupt object on the remote (conf: its DVC config)."""
    remote = Remote(root, conf, timeout)
    wanted = []  # (out, md5)
    for out, md5 in declared_outs(root):
        wanted.append((out, md5))
        if md5.endswith(".dir"):
            entries = listing(root, remote, md5) or []
            wanted += [(out, e["md5"]) for e in entries if e.get("md5")]
    unique = sorted({md5 for _, md5 in wanted})
    with ThreadPoolExecutor(max_workers=16) as pool:
        found = dict(zip(unique, pool.map(remote.check, unique), strict=True))
    problems: dict[str, dict] = {}
    for out, md5 in wanted:
        state = found[md5]
        if state is None:
            continue
        entry = problems.setdefault(out, {"missing": [], "corrupt": []})
        if state == "missing":
            entry["missing"].append((md5, remote.location(md5)))
        else:
            entry["corrupt"].append((md5, remote.location(md5), state))
    return problems


def s3_client(conf, timeout: float):
    """A boto3 S3 client for a DVC remote's config (endpoint, region, keys from the config or
    the environment), failing fast."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=conf.get("endpointurl"),
        region_name=conf.get("region") or "us-east-1",
        aws_access_key_id=conf.get("access_key_id"),
        aws_secret_access_key=conf.get("secret_access_key"),
        config=Config(connect_timeout=timeout, read_timeout=timeout,
                      retries={"max_attempts": 1, "mode": "standard"}))
