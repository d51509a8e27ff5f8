"""Ray, as this project uses it (issue 31): predict's `--ray [ADDRESS]` and prepare's
`prepare.engine: ray` connect here, and nowhere else.

- `ADDRESS` empty or "local": a one-machine cluster started for this run on 127.0.0.1 and
  stopped with it (always a new one: never a cluster `ray start` left running here);
  otherwise an existing cluster's address (`ray start --head` prints it: `HOST:6379`, or
  `ray://HOST:10001` for Ray Client). An address where nothing answers is a ConnectionError
  within seconds (check_reachable), not Ray's minutes of retries; a 127.0.0.1/localhost
  address stays on loopback.
- Offline and quiet: usage statistics off (RAY_USAGE_STATS_ENABLED=0, unless the user set it),
  no dashboard started by us, Ray's own log lines kept out of our output.
- Nothing here changes a result: where the work runs is never part of an out.
- RayMap: an ordered, windowed map of functions over jobs on the cluster (imap, get,
  shutdown), with StorePages to give back the object store's pages a result was read from.
  It knows nothing of what the functions do (prepare's: stages/prepare_ray.py).

Ray is imported here only, when a run asks for it: `--help` and local runs never load it.
"""
import os

LOCAL = ("", "local")
LOOPBACK = ("127.0.0.1", "localhost")


def host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a `HOST:PORT` or `ray://HOST:PORT` address; None for others ("auto")."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    return (host.strip("[]"), int(port)) if sep and port.isdigit() else None


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """ConnectionError, naming the address and the fix, when nothing accepts a connection at
    it (Ray itself retries an unreachable address for minutes before it gives up)."""
    import socket

    where = host_port(address)
    if where is None:
        return
    try:
        socket.create_connection(where, timeout=timeout).close()
    except OSError as exc:
        raise ConnectionError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}): start one there "
            f"(`ray start --head` on that machine prints the address, HOST:6379), or give an "
            f"empty address for a cluster on this machine alone") from None


def connect(address: str | None = None, num_cpus: int | None = None,
            runtime_env: dict | None = None):
    """The `ray` module, connected to `address` (see the module doc); num_cpus bounds a local
    cluster (default: this machine's cores). An unreachable address is a ConnectionError at
    once (check_reachable). runtime_env: Ray's, for this job (e.g. py_modules: our code)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    where = host_port(address or "")
    if (address or "") in LOCAL or (where and where[0] in LOOPBACK):
        # a local cluster binds to loopback only, and a loopback address stays one (else Ray
        # swaps 127.0.0.1 for this machine's network address): Ray reads this flag at import
        # (its one-machine mode: every address 127.0.0.1, nothing listens on the network)
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    if (address or "") not in LOCAL:
        check_reachable(address)
    import ray

    if ray.is_initialized():
        return ray
    quiet = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False,
             "configure_logging": False}
    if runtime_env:
        quiet["runtime_env"] = runtime_env
    if (address or "") in LOCAL:
        ray.init(address="local", num_cpus=num_cpus, **quiet)  # new: never one found here
    else:
        ray.init(address=address, **quiet)
    return ray


def disconnect() -> None:
    """Leave the cluster (a local one is stopped); harmless when not connected."""
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


class RayMap:
    """An ordered, windowed map over functions on a Ray cluster: imap(func, jobs) runs
    func(job) as a Ray task (one CPU, retried up to 3 times on a lost worker) for each job and
    yields the results in the jobs' order, with at most `window` tasks submitted and not yet
    yielded: the object store and the caller hold that many results at most, whatever the
    number of jobs. func is pickled by reference (its module and name), so it must live in a
    module the workers import, never in __main__. Connects on creation (connect's arguments;
    an unreachable address is a ConnectionError); shut down as a process pool is."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None,
                 runtime_env: dict | None = None, window: int | None = None):
        self.ray = connect(address, num_cpus, runtime_env)
        resources = self.ray.cluster_resources()
        self.cpus = max(1, int(resources.get("CPU", 1)))
        self.nodes = len([n for n in self.ray.nodes() if n.get("Alive")])
        self.window = window or 2 * self.cpus + 2  # every CPU busy, one result behind each
        self.remotes, self.pending = {}, []

    def imap(self, func, jobs):
        """func(job) of every job, in the cluster, yielded in the jobs' order; at most
        self.window submitted and not yet yielded."""
        from collections import deque

        if func not in self.remotes:
            self.remotes[func] = self.ray.remote(num_cpus=1, max_retries=3)(func)
        remote = self.remotes[func]
        pending = self.pending = deque()
        for job in jobs:
            pending.append(remote.remote(job))
            if len(pending) >= self.window:
                yield self.get(pending.popleft())
        while pending:
            yield self.get(pending.popleft())

    def get(self, ref):
        """A task's result; its error as the worker raised it (not Ray's wrapper of it)."""
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Cancel what is still in flight (on an error), and leave the cluster (a local one
        stops)."""
        if cancel_futures:
            for ref in self.pending:
                try:
                    self.ray.cancel(ref)
                except Exception:  # noqa: BLE001 (done or gone already: nothing to cancel)
                    pass
        self.pending = []
        disconnect()


class StorePages:
    """Gives back this process's mappings of the object store's pages a result was read from.
    ray.get maps a large result straight from the store's shared memory (/dev/shm/plasma...,
    a shared mapping), and every page of it the driver reads stays counted in its RSS after
    the object is gone: the driver's RSS would grow with the bytes read, up to the store's
    size. After a chunk is copied into its shard, madvise(MADV_DONTNEED) drops those pages
    from this process only (a shared mapping keeps its data; another read faults it back in).
    Nothing is done for a result held in this process's own memory (a small, inlined one)."""

    def __init__(self):
        self.ranges = []

    def store_ranges(self) -> list:
        out = []
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and "plasma" in parts[5] and parts[1].endswith("s"):
                    lo, hi = (int(v, 16) for v in parts[0].split("-"))
                    out.append((lo, hi))
        return out

    def release(self, array) -> None:
        import ctypes
        import mmap

        if not hasattr(mmap, "MADV_DONTNEED") or not array.nbytes:
            return
        start = array.ctypes.data
        end = start + array.nbytes
        inside = [r for r in self.ranges if r[0] <= start and end <= r[1]]
        if not inside:
            self.ranges = self.store_ranges()
            inside = [r for r in self.ranges if r[0] <= start and end <= r[1]]
        page = mmap.PAGESIZE
        first, last = -(-start // page) * page, end // page * page  # the whole pages only
        if inside and last > first:
            ctypes.CDLL(None, use_errno=True).madvise(
                ctypes.c_void_p(first), ctypes.c_size_t(last - first), mmap.MADV_DONTNEED)
