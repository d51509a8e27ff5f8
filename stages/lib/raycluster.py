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
