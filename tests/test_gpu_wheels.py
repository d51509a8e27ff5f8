"""bench/gpu_wheels.py: which packages of requirements.lock go into the wheel folder for a GPU
machine with no package index (the downloads themselves need the index: not run here)."""
import importlib.util

from tests.conftest import ROOT


def module():
    spec = importlib.util.spec_from_file_location("gpu_wheels", ROOT / "bench/gpu_wheels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_targets_torch_stack_and_what_it_has_stay_out(tmp_path):
    gw = module()
    lock = gw.locked(ROOT / "requirements.lock")
    names = {gw.canonical(n) for n, _ in lock}
    assert {"torch", "torchvision", "dvc", "great-expectations", "pyyaml"} <= names
    have = tmp_path / "have.txt"
    have.write_text("PyYAML==6.0.2\nnumpy==2.5.2\n# a comment\nonnxruntime\n")
    chosen = {gw.canonical(n) for n, _ in gw.wanted(lock, gw.present(have), False)}
    assert "dvc" in chosen and "great-expectations" in chosen and "dvclive" in chosen
    for gone in ("torch", "torchvision", "triton", "nvidia-cudnn-cu13", "cuda-bindings",
                 "pyyaml", "numpy", "onnxruntime", "ray", "openvino", "botocore", "moto"):
        assert gone not in chosen, gone
    everything = {gw.canonical(n) for n, _ in gw.wanted(lock, set(), True)}
    assert {"ray", "openvino", "botocore", "numpy"} <= everything
    assert not any(gw.GPU_STACK.match(n) for n in everything)
    versions = dict((gw.canonical(n), v) for n, v in gw.wanted(lock, set(), True))
    assert versions["dvc"] == dict((gw.canonical(n), v) for n, v in lock)["dvc"]
