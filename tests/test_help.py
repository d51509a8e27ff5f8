import subprocess
import sys

import pytest

from tests.conftest import ROOT

STAGES = ["sample", "ingest", "validate", "split", "prepare", "train", "evaluate", "export",
          "report"]
TOOLS = ["init", "predict", "serve", "verify", "doctor", "smoke", "plots_template", "synth_ocr",
         "synth_speech", "ocr_testlines", "registry"]
MODULES = [f"stages.{name}" for name in STAGES] + [f"tools.{name}" for name in TOOLS]

PROBE = """
import runpy, sys
sys.argv = ["{module}", "--help"]
try:
    runpy.run_module("{module}", run_name="__main__")
except SystemExit as exc:
    assert exc.code == 0, exc.code
heavy = sorted(m for m in ("torch", "torchvision", "great_expectations", "onnx", "onnxruntime",
                           "sklearn", "dvclive", "ray", "soundfile") if m in sys.modules)
print("HEAVY:" + ",".join(heavy))
"""


def test_every_command_module_is_listed():
    """A new stage or tool must be added above, so its --help is checked too."""
    modules = [(f"{pkg}.{path.stem}", path) for pkg in ("stages", "tools")
               for path in (ROOT / pkg).glob("*.py") if path.stem != "__init__"]
    packages = [(f"{pkg}.{path.parent.name}", path) for pkg in ("stages", "tools")
                for path in (ROOT / pkg).glob("*/__main__.py")]  # python -m stages.report
    found = sorted(name for name, path in modules + packages if "def main(" in path.read_text())
    assert found == sorted(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_help_is_instant_and_imports_no_heavy_library(module):
    proc = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout
    assert "--help" in proc.stdout
    assert proc.stdout.strip().endswith("HEAVY:"), proc.stdout
