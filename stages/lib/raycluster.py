"""Ray, as this project uses it (issue 31): predict's `--ray [ADDRESS]` and prepare's
`prepare.engine: ray` connect here, and nowhere else.

- `ADDRESS` empty or "local": a one-machine cluster started for this run on 127.0.0.1 and
  stopped with it; otherwise an existing cluster's address (`ray start --head` prints it:
  `HOST:6379`, or `ray://HOST:10001` for Ray Client).
- Offline and quiet: usage statistics off (RAY_USAGE_STATS_ENABLED=0, unless the user set it),
  no dashboard started by us, Ray's own log lines kept out of our output.
- Nothing here changes a result: where the work runs is never part of an out.

Ray is imported here only, when a run asks for it: `--help` and local runs never load it.
"""
import os

LOCAL = ("", "local")


def connect(address: str | None = None, num_cpus: int | None = None,
            runtime_env: dict | None = None):
    """The `ray` module, connected to `address` (see the module doc); num_cpus bounds a local
    cluster (default: this machine's cores); runtime_env is this job's (Ray's runtime_env,
    e.g. {"env_vars": {...}} for its workers)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if (address or "") in LOCAL:  # a local cluster binds to loopback only: Ray reads this
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # flag at import (its
        # one-machine mode: every address 127.0.0.1, nothing listens on the network)
    import ray

    if ray.is_initialized():
        return ray
    quiet = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False,
             "configure_logging": False}
    if runtime_env:
        quiet["runtime_env"] = runtime_env
    if (address or "") in LOCAL:
        # address="local": always a new cluster of our own; ray.init() without an address
        # would join the latest cluster started on this machine (/tmp/ray/ray_current_cluster)
        ray.init(address="local", num_cpus=num_cpus, **quiet)
    else:
        ray.init(address=address, **quiet)
    return ray


def disconnect() -> None:
    """Leave the cluster (a local one is stopped); harmless when not connected."""
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
