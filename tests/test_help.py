import subprocess
import sys

import pytest

from tests.conftest import ROOT

STAGES = ["sample", "ingest", "validate", "split", "prepare", "train", "evaluate", "export",
          "smoke", "report", "predict", "serve", "verify", "doctor"]

PROBE = """
import runpy, sys
sys.argv = ["{name}", "--help"]
try:
    runpy.run_module("stages.{name}", run_name="__main__")
except SystemExit as exc:
    assert exc.code == 0, exc.code
heavy = sorted(m for m in ("torch", "torchvision", "great_expectations", "onnx", "onnxruntime",
                           "sklearn", "dvclive") if m in sys.modules)
print("HEAVY:" + ",".join(heavy))
"""


@pytest.mark.parametrize("name", STAGES)
def test_help_is_instant_and_imports_no_heavy_library(name):
    proc = subprocess.run([sys.executable, "-c", PROBE.format(name=name)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout
    assert "--help" in proc.stdout
    assert proc.stdout.strip().endswith("HEAVY:"), proc.stdout
