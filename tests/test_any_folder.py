"""The outs do not depend on where the project or its virtualenv lives.

torch.onnx.export writes the stack trace of every node, absolute paths included, into the ONNX
file, and TorchScript keeps source paths in its debug records; stages/lib/model/onnx_clean.py strips
them. A second venv path costs nothing: a symlink to this run's venv (`venv_elsewhere`), since
Python computes site-packages, and so every module's __file__, from the path it was started by.
"""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from stages.lib.model.onnx_clean import strip_source_paths
from tests.conftest import ROOT, TINY_RUN, venv_elsewhere
from tools.project import copy_project, dvc, git, lock_hashes

ALL_STAGES = ["sample", "ingest", "validate", "split", "prepare", "train", "evaluate", "export",
              "report"]

# Exports a seeded small_cnn through stages.lib.model.formats, once as the stage does and once with
# the stripping switched off (torch.onnx.export's own bytes), and its TorchScript with and without
# the debug records. The ONNX model is behind export's test hook, whose module is defined in
# stages/export.py, so that the project's own frames get into the stack traces too.
EXPORT = r"""
import json, os, sys
from pathlib import Path

import torch

import stages.export as export
from stages.lib.model import formats, onnx_clean
from stages.lib.hooks import env_name
from stages.tasks import default_task
from stages.tasks.classification.model import build_model

out = Path(sys.argv[1])
task = default_task()
meta = {"classes": [str(i) for i in range(10)], "image_size": 8, "channels": 1, "mean": [0.5],
        "std": [0.25]}
torch.manual_seed(0)
model = build_model("small_cnn", 10, 1).eval()
os.environ[env_name("EXPORT_MEAN_SHIFT")] = "0.5"
hooked = export.with_test_hook(model)
(out / "model.onnx").write_bytes(formats.onnx_bytes(hooked, meta, task))
(out / "torchscript.pt").write_bytes(formats.torchscript_bytes(model, meta, task))
onnx_clean.strip_source_paths = lambda proto: None  # as torch writes them
onnx_clean.strip_torchscript_debug = lambda blob: blob
(out / "raw-model.onnx").write_bytes(formats.onnx_bytes(hooked, meta, task))
(out / "raw-torchscript.pt").write_bytes(formats.torchscript_bytes(model, meta, task))
print(json.dumps({"torch": torch.__file__, "stages": export.__file__}))
"""


def needles(*paths) -> set[str]:
    """Strings no out may contain: every path given (as given and resolved), the test run's
    venv and project, site-packages, the home folder and the host name (when long enough not
    to turn up by chance in binary weights)."""
    found = {"site-packages"}
    for path in (*paths, sys.prefix, ROOT):
        found |= {str(path), os.path.realpath(path)}
    home, host = os.path.expanduser("~"), socket.gethostname()
    found |= {home} if len(home) > 1 else set()
    found |= {host} if len(host) >= 6 else set()
    return found


def leaks(blobs: dict, paths) -> list[tuple[str, str]]:
    """(name, needle) for every blob ({name: bytes}) holding one of needles(*paths)."""
    return [(name, n) for name, blob in sorted(blobs.items())
            for n in sorted(needles(*paths)) if n.encode() in readable(blob)]


def readable(blob: bytes) -> bytes:
    """The blob, or for a zip archive (TorchScript: its records are deflated) every record."""
    import io
    import zipfile

    if not blob.startswith(b"PK\x03\x04"):
        return blob
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        return b"".join(archive.read(name) for name in archive.namelist())


def export_in(runs: dict) -> dict:
    """Run EXPORT for every {folder: (python, project)} at once (one core each), importing the
    project from `project`; {folder: ({file: bytes}, info)}."""
    procs = {}
    for out, (python, project) in runs.items():
        Path(out).mkdir(parents=True)
        env = {**os.environ, "PYTHONPATH": str(project)}
        procs[out] = subprocess.Popen([str(python), "-c", EXPORT, str(out)], cwd=out, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = {}
    for out, proc in procs.items():
        stdout, stderr = proc.communicate()
        assert proc.returncode == 0, stderr
        results[out] = ({p.name: p.read_bytes() for p in Path(out).iterdir()},
                        json.loads(stdout))
    return results


def ort_logits(blob, x):
    import onnxruntime as ort

    session = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    return session.run(["logits"], {"input": x})[0]


@pytest.mark.e2e
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")
def test_export_is_the_same_from_another_venv_and_project_path(tmp_path):
    import io

    import onnx
    import torch

    python = venv_elsewhere(tmp_path / "elsewhere" / "venv")
    project = tmp_path / "elsewhere" / "project"
    project.symlink_to(ROOT, target_is_directory=True)
    runs = export_in({tmp_path / "here": (sys.executable, ROOT),
                      tmp_path / "there": (python, project)})
    (here, info_here), (there, info_there) = runs[tmp_path / "here"], runs[tmp_path / "there"]
    # The premise: torch and the stage code were imported from different paths.
    assert Path(info_here["torch"]).is_relative_to(sys.prefix), info_here
    assert Path(info_there["torch"]).is_relative_to(python.parent.parent), info_there
    assert info_here["stages"] == str(ROOT / "stages/export.py")
    assert info_there["stages"] == str(project / "stages/export.py")
    # Without stripping torch.onnx.export writes those paths, so the bytes differ: the real
    # problem. (If these fail, the switch-off in EXPORT no longer reaches formats.onnx_bytes.)
    for name in ("raw-model.onnx", "raw-torchscript.pt"):
        assert here[name] != there[name], name
        assert b"site-packages" in readable(here[name]), name
        assert sys.prefix.encode() in readable(here[name]), name
        assert str(python.parent.parent).encode() in readable(there[name]), name
    assert str(ROOT / "stages/export.py").encode() in here["raw-model.onnx"]
    assert str(project / "stages/export.py").encode() in there["raw-model.onnx"]
    # As the stage writes them: the same bytes, no path of either side, nothing lost.
    x = np.random.default_rng(0).normal(size=(5, 1, 8, 8)).astype(np.float32)
    assert here["model.onnx"] == there["model.onnx"], "model.onnx depends on the paths"
    proto, raw = (onnx.load_from_string(here[k]) for k in ("model.onnx", "raw-model.onnx"))
    onnx.checker.check_model(proto, full_check=True)
    keys = {p.key for node in proto.graph.node for p in node.metadata_props}
    assert "pkg.torch.onnx.stack_trace" not in keys and "namespace" in keys, keys
    assert [n.op_type for n in proto.graph.node] == [n.op_type for n in raw.graph.node]
    assert [(p.key, p.value) for p in proto.metadata_props] == [
        (p.key, p.value) for p in raw.metadata_props]
    assert np.array_equal(ort_logits(here["model.onnx"], x), ort_logits(here["raw-model.onnx"], x))
    assert here["torchscript.pt"] == there["torchscript.pt"], "TorchScript depends on the paths"
    with torch.no_grad():
        got = torch.jit.load(io.BytesIO(here["torchscript.pt"]))(torch.from_numpy(x))
        want = torch.jit.load(io.BytesIO(here["raw-torchscript.pt"]))(torch.from_numpy(x))
    assert torch.equal(got, want)
    clean = {k: v for k, v in {**here, **{"there/" + k: v for k, v in there.items()}}.items()
             if "raw-" not in k}
    assert not leaks(clean, [tmp_path, project, python.parent.parent])


def test_strip_source_paths_reaches_every_graph_and_keeps_the_rest():
    """Stack traces and doc strings go from nodes, values, the graph, sub-graphs and local
    functions; other metadata, the model-level metadata and the computation stay."""
    import onnx
    from onnx import TensorProto, helper

    trace = 'File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", line 1'

    def traced(proto, scope):
        proto.doc_string = trace
        proto.metadata_props.add(key="namespace", value=scope)
        proto.metadata_props.add(key="pkg.torch.onnx.stack_trace", value=trace)
        return proto

    def value(name):
        return traced(helper.make_tensor_value_info(name, TensorProto.FLOAT, [2]), name)

    def branch(name, op):
        node = traced(helper.make_node(op, ["x"], [name]), name)
        return traced(helper.make_graph([node], name, [], [value(name)]), name)

    double = traced(helper.make_node("Add", ["a", "a"], ["b"]), "double")
    function = traced(helper.make_function("local", "Double", ["a"], ["b"], [double],
                                           [helper.make_opsetid("", 20)]), "function")
    nodes = [traced(helper.make_node("If", ["cond"], ["y"], then_branch=branch("t", "Neg"),
                                     else_branch=branch("e", "Abs")), "if"),
             traced(helper.make_node("Double", ["y"], ["z"], domain="local"), "call")]
    graph = traced(helper.make_graph(nodes, "main", [value("cond"), value("x")], [value("z")]),
                   "main")
    graph.input[0].type.tensor_type.elem_type = TensorProto.BOOL
    graph.input[0].type.tensor_type.shape.Clear()
    model = helper.make_model(graph, functions=[function], ir_version=10,
                              opset_imports=[helper.make_opsetid("", 20),
                                             helper.make_opsetid("local", 1)])
    model.doc_string = "the project's own"
    model.metadata_props.add(key="classes", value='["a", "b"]')
    before = model.SerializeToString()

    strip_source_paths(model)

    after = model.SerializeToString()
    assert b"site-packages" in before and b"site-packages" not in after
    assert b"stack_trace" not in after
    # every "namespace" entry stays: the main graph, its 2 nodes and 3 values, 2 branches with
    # a node and a value each, the function and its node
    assert after.count(b"namespace") == before.count(b"namespace") == 14
    assert model.doc_string == "the project's own"
    assert [(p.key, p.value) for p in model.metadata_props] == [("classes", '["a", "b"]')]
    onnx.checker.check_model(model, full_check=True)
    import onnxruntime as ort

    feed = {"x": np.array([-1.5, 2.0], np.float32)}
    for cond, want in ((True, [3.0, -4.0]), (False, [3.0, 4.0])):
        run = {k: ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(
            ["z"], {**feed, "cond": np.array(cond)})[0] for k, blob in (("b", before),
                                                                       ("a", after))}
        assert np.array_equal(run["a"], run["b"]) and run["a"].tolist() == want


def out_files(root, lock) -> dict[str, bytes]:
    """{path: bytes} of every file of every out in the dvc.lock `lock` (folders walked)."""
    files = {}
    for entry in lock["stages"].values():
        for out in entry.get("outs", []):
            path = Path(root) / out["path"]
            for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
                if f.is_file():
                    files[str(f.relative_to(root))] = f.read_bytes()
    return files


@pytest.mark.e2e
def test_two_clones_at_two_paths_with_two_venvs_write_identical_outs(trained_project,
                                                                     tmp_path):
    """trained_project ran `dvc repro` (TINY_RUN) with this venv at its own temp path; a git
    clone of the same committed copy elsewhere, with the venv at another path, gets the same
    dvc.lock and the same bytes in every out, and no out names a path, the home or the host."""
    python = venv_elsewhere(tmp_path / "venvs" / "other")
    committed = copy_project(ROOT, tmp_path / "committed", params=TINY_RUN)
    clone = tmp_path / "some" / "other" / "clone"
    git(tmp_path, "clone", "-q", str(committed), str(clone))
    proc = dvc(clone, "repro", python=python)
    assert [line.split("'")[1] for line in proc.stdout.splitlines()
            if line.startswith("Running stage '")] == ALL_STAGES
    first, second = lock_hashes(trained_project), lock_hashes(clone)
    assert set(first) == set(second)
    assert first == second, {k: (first[k], second[k]) for k in first if first[k] != second[k]}
    assert (clone / "dvc.lock").read_text() == (trained_project / "dvc.lock").read_text()
    lock = yaml.safe_load((clone / "dvc.lock").read_text())
    ours, theirs = out_files(trained_project, lock), out_files(clone, lock)
    # cached outs and the uncached ones (metrics, plots: in git, not in the DVC cache) alike
    assert ours.keys() == theirs.keys()
    assert {"models/model.onnx", "reports/run.html", "metrics/export.json",
            "plots/train/metrics.json"} <= ours.keys()
    assert [p for p in ours if ours[p] != theirs[p]] == []
    assert not leaks(theirs, [clone, committed, tmp_path, trained_project, python.parent.parent])
    assert not leaks(ours, [clone, committed, tmp_path, trained_project, python.parent.parent])
