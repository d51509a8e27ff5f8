"""Test hooks, all in one place: each is an environment variable PIPELINE_TEST_<NAME>.

They exist only so tests can reach states a real run reaches by accident (a kill mid-step, a
poisoned sample, a broken export, a slow batch). Unset, which they always are in real runs, each
costs one dictionary lookup and changes nothing.
"""
import os

PREFIX = "PIPELINE_TEST_"
HOOKS = {
    "KILL_AT_STEP": "train: SIGKILL the stage right after optimiser step N",
    "INTERRUPT_AT_STEP": "train: SIGINT (as Ctrl-C sends) the stage right after step N",
    "POISON": "train: set the train sample with this path (as in data/split/train.csv) to inf",
    "EXPORT_MEAN_SHIFT": "export: the exported graphs add this number to their input, as a "
                         "model exported with another normalisation would (the gate must fail)",
    "EXPORT_FORMAT_SHIFT": "export: FORMAT=SHIFT (e.g. openvino=0.5): that format is converted "
                           "from an ONNX graph that adds SHIFT to its input (its gate must fail)",
    "PREDICT_DELAY_S": "tools.predict: sleep this many seconds after every written batch",
    "SERVE_DELAY_S": "tools.serve: each POST /predict waits this many seconds after taking its "
                     "model, before decoding (requests stay in flight across a reload)",
    "PREDICT_RAY_DELAY_S": "tools.predict --ray: each actor sleeps this many seconds after "
                           "every batch it predicts (a node can be removed mid-shard)",
}


def env_name(name: str) -> str:
    if name not in HOOKS:
        raise KeyError(f"unknown test hook {name}; known: {', '.join(HOOKS)}")
    return PREFIX + name


def forwarded() -> dict:
    """The hooks set here, {env name: value}: what a process started elsewhere (a Ray worker)
    must be given to see them."""
    return {k: v for k, v in os.environ.items() if k.startswith(PREFIX)}


def value(name: str) -> str:
    """The hook's value, "" when unset."""
    return os.environ.get(env_name(name), "")
