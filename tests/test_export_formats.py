"""export.formats: OpenVINO and onnx_int8 beside model.onnx, each behind its gates, in real
runtimes (onnxruntime, OpenVINO), on a real `dvc repro` of the sample (formats_project)."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import yaml

from tests.conftest import (ROOT, copy_run, measured, missing_tool, run_stage, run_tool,
                            venv_elsewhere, wait_ready)
from tools.project import dvc, lock_hashes, set_params

pytestmark = pytest.mark.e2e

FORMAT_OUTS = ("models/model.onnx", "models/openvino", "models/int8", "models/tensorrt")


def export_metrics(project) -> dict:
    return json.loads((project / "metrics/export.json").read_text())


def test_each_format_is_written_gated_and_measured(formats_project):
    p = formats_project
    assert sorted(f.name for f in (p / "models/openvino").iterdir()) == ["model.bin",
                                                                        "model.xml"]
    assert [f.name for f in (p / "models/int8").iterdir()] == ["model.int8.onnx"]
    # no CUDA device here: a note, not an empty folder
    assert [f.name for f in (p / "models/tensorrt").iterdir()] == ["DISABLED.txt"]
    m = export_metrics(p)
    assert m["tensorrt"] == "skipped: no CUDA device"
    headline = m["headline"]
    assert headline["metric"] == "accuracy" and headline["higher_is_better"] is True
    eval_accuracy = json.loads((p / "metrics/eval.json").read_text())["accuracy"]
    assert headline["value"]["pytorch"] == pytest.approx(eval_accuracy)  # the same test split
    assert eval_accuracy > 0.5  # accurate enough for the perturbed gates below to bite
    assert set(headline["drop"]) == {"onnx", "openvino", "onnx_int8"}
    assert all(d <= headline["max_drop"] for d in headline["drop"].values())
    # OpenVINO in f32 matches onnxruntime within the ONNX gate's own tolerance
    assert measured(p)["openvino"]["max_abs_diff"] <= 1e-4
    assert m["openvino"]["top1_agreement"] == 1.0
    # int8: about a quarter of the fp32 bytes (this tiny CNN carries more graph than weights)
    onnx_bytes = (p / "models/model.onnx").stat().st_size
    int8_bytes = (p / "models/int8/model.int8.onnx").stat().st_size
    assert m["onnx_int8"]["bytes"] == int8_bytes and int8_bytes < 0.35 * onnx_bytes
    assert m["onnx_int8"]["calibration_samples"] == 64
    # the IR keeps f32 weights (no FP16 compression) and asks for f32 inference
    xml = (p / "models/openvino/model.xml").read_text()
    assert 'element_type="f16"' not in xml and 'INFERENCE_PRECISION_HINT value="f32"' in xml
    assert str(p) not in xml and "site-packages" not in xml
    # the second repro does nothing
    assert "Data and pipelines are up to date" in dvc(p, "status").stdout


def test_forced_rerun_elsewhere_is_bit_identical(formats_project, tmp_path):
    """A forced rerun of export without the run cache, in a copy at another path with the venv
    reached through another path, writes the same bytes for every format's out (int8
    calibration included)."""
    project = copy_run(formats_project, tmp_path / "elsewhere" / "copy")
    before = lock_hashes(project)
    dvc(project, "repro", "--force", "--no-run-cache", "export",
        python=venv_elsewhere(tmp_path / "venv2"))
    after = lock_hashes(project)
    for out in FORMAT_OUTS:
        assert after[("export", out)] == before[("export", out)], out


@pytest.mark.parametrize("fmt, message", [
    ("openvino", "OpenVINO disagrees with ONNX (onnxruntime) on"),
    ("onnx_int8", "ONNX int8 loses"),
])
def test_a_perturbed_conversion_fails_its_gate_naming_the_image(formats_project, tmp_path,
                                                                 fmt, message):
    project = copy_run(formats_project, tmp_path / "copy")
    before = {f: (project / f).read_bytes() for f in
              ("models/model.onnx", "models/openvino/model.bin", "models/int8/model.int8.onnx")}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PIPELINE_TEST_EXPORT_FORMAT_SHIFT": f"{fmt}=2"}
    proc = subprocess.run([sys.executable, "-m", "stages.export"], cwd=project, env=env,
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert re.search(r"Worst image: \d/\d{4}\.pgm \(", proc.stderr), proc.stderr
    assert "not written" in proc.stderr
    for f, data in before.items():  # a failed gate leaves the previous outs as they were
        assert (project / f).read_bytes() == data, f
    m = export_metrics(project)  # the numbers that failed are still written
    assert m["headline"]["drop"][fmt] > m["headline"]["max_drop"] or \
        measured(project)[fmt]["max_abs_diff"] > 1e-4


def test_predict_with_openvino_and_int8_agrees_with_onnxruntime(formats_project, tmp_path):
    images = formats_project / "data/sample/7"
    rows = {}
    for name, args in {"onnx": [], "openvino": ["--backend", "openvino"],
                       "int8": ["--model", "models/int8/model.int8.onnx"]}.items():
        out = tmp_path / f"{name}.jsonl"
        proc = run_tool("predict", str(images), "--out", str(out), *args, cwd=formats_project)
        assert proc.returncode == 0, proc.stderr
        rows[name] = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows["onnx"]) == 30
    for ref, ov in zip(rows["onnx"], rows["openvino"], strict=True):
        assert ov["label"] == ref["label"] and ov["score"] == pytest.approx(ref["score"], abs=1e-5)
    agree = np.mean([a["label"] == b["label"] for a, b in zip(rows["onnx"], rows["int8"],
                                                                strict=True)])
    assert agree >= 0.9


def test_serve_with_the_openvino_backend(formats_project, tmp_path):
    import httpx

    from tests.test_serve import free_port

    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "tools.serve", "--port", str(port),
                                 "--backend", "openvino", "--log-level", "warning"],
                                cwd=formats_project, stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log)
        card = httpx.get(f"{url}/model").json()
        assert card["backend"] == "openvino" and card["classes"] == [str(d) for d in range(10)]
        image = sorted((formats_project / "data/sample/7").iterdir())[0]
        answer = httpx.post(f"{url}/predict", files=[("files", (image.name, image.read_bytes()))],
                            timeout=30)
        assert answer.status_code == 200, answer.text
        out = tmp_path / "p.jsonl"
        assert run_tool("predict", str(image), "--out", str(out),
                        cwd=formats_project).returncode == 0
        expected = json.loads(out.read_text())
        got = answer.json()["predictions"][0]
        assert got["label"] == expected["label"]
        assert got["score"] == pytest.approx(expected["score"], abs=1e-5)
    finally:
        proc.terminate()
        proc.wait(20)


def test_the_brightness_task_gets_the_formats_too(formats_project, tmp_path):
    """A task that lives in the tests (a regression scored by MAE, lower is better) gets
    OpenVINO and int8 through the Task seam, with no stage change."""
    import shutil

    project = copy_run(formats_project, tmp_path / "copy")
    shutil.copytree(ROOT / "tests/tasks/brightness", project / "stages/tasks/brightness")
    # MAE on [0, 1] brightness
    set_params(project, {"task": "brightness", "export.max_metric_drop": 0.02})
    dvc(project, "repro", "export")
    m = export_metrics(project)
    assert m["headline"]["metric"] == "mae" and m["headline"]["higher_is_better"] is False
    for fmt in ("onnx", "openvino", "onnx_int8"):
        value, drop = m["headline"]["value"][fmt], m["headline"]["drop"][fmt]
        assert drop == pytest.approx(value - m["headline"]["value"]["pytorch"], abs=1e-9)
        assert drop <= 0.02
    assert measured(project)["openvino"]["max_abs_diff"] <= 1e-4
    assert (project / "models/int8/model.int8.onnx").is_file()


def test_default_formats_leave_the_outs_as_they_were():
    """export.formats defaults to [onnx]: the extra folders are empty, metrics/export.json has
    none of their keys, and the format knobs stay out of model.onnx's params hash."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert params["export"]["formats"] == ["onnx"]
    from stages.lib.model.provenance import FORMAT_KEYS
    from stages.lib.params import Export

    assert set(FORMAT_KEYS) == {"formats", "max_metric_drop", "calibration_samples"}
    assert {f for f in Export.__dataclass_fields__} >= set(FORMAT_KEYS)


def test_unknown_or_repeated_formats_are_refused():
    from stages.lib.io import StageError
    from stages.lib.params import Export, parse

    with pytest.raises(StageError, match="unknown format.*tflite"):
        parse(Export, "export", {"formats": ["onnx", "tflite"]}, "params.yaml")
    with pytest.raises(StageError, match="twice"):
        parse(Export, "export", {"formats": ["onnx", "openvino", "openvino"]}, "params.yaml")


def test_calibration_sample_is_a_pure_function_of_the_seed():
    from stages.lib.model.formats import calibration_indices

    a = calibration_indices(1000, 64, 0)
    assert np.array_equal(a, calibration_indices(1000, 64, 0)) and len(set(a)) == 64
    assert not np.array_equal(a, calibration_indices(1000, 64, 1))
    assert np.array_equal(calibration_indices(10, 64, 0), np.arange(10))


def test_openvino_never_starts_its_telemetry(tmp_path):
    """Loading OpenVINO through stages.lib.model.formats sends nothing and writes nothing in
    $HOME."""
    code = ("import sys; from stages.lib.model.formats import import_openvino; import_openvino(); "
            "import openvino.tools.ovc; "
            "print(sys.modules['openvino.tools.ovc.telemetry_utils'].tm.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "openvino.tools.ovc.telemetry_stub"
    assert list(tmp_path.iterdir()) == []


def test_export_help_stays_light():
    proc = run_stage("export", "--help")
    assert proc.returncode == 0 and "export.formats" in proc.stdout


def test_gpu_check_script_parses_and_prints_its_table_without_a_gpu(tmp_path):
    """bench/gpu_check.sh cannot run here (no GPU): its syntax, its control flow up to the
    CUDA check and the table it prints are what this machine can check."""
    script = ROOT / "bench/gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                          env={**os.environ, "SKIP_INSTALL": "1", "WORK": str(tmp_path),
                               "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"})
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: run bench/gpu_check.sh itself")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    rows = [line.split("\t") for line in (tmp_path / "table.tsv").read_text().splitlines()]
    tasks = ("classification", "detection", "segmentation", "ocr")
    assert [r[0] for r in rows] == ["install", "gpu"] + [
        f"{t} {step}" for t in tasks for step in ("repro", "same-bytes", "2-workers", "predict")]
    assert rows[0][1] == "ok"
    for name, status, _, result in rows[1:]:
        assert status == "skipped" and result == "skipped: no CUDA device", name
    printed = proc.stdout.splitlines()
    assert printed[printed.index(next(x for x in printed if x.startswith("step "))) + 1:] \
        == [line for line in printed if line.split()[0] in {r[0].split()[0] for r in rows}]


def test_int8_calibration_is_bit_stable_on_one_core(formats_project):
    """Quantizing on one core writes the bytes the stage wrote with all of them: MinMax
    calibration keeps exact extremes, and onnxruntime does not split a sum across threads."""
    import shutil

    if not shutil.which("taskset"):
        pytest.skip("taskset is not installed")
    code = (
        "import sys\n"
        "from stages.lib.model import formats\n"
        "from stages.lib.data.shards import load_split\n"
        "from stages.lib.params import load\n"
        "x, _, _ = load_split('train')\n"
        "idx = formats.calibration_indices(len(x), load('export').calibration_samples, "
        "load('train').seed)\n"
        "blob = formats.int8_bytes(open('models/model.onnx', 'rb').read(), x[idx])\n"
        "sys.exit(0 if blob == open('models/int8/model.int8.onnx', 'rb').read() else 9)\n")
    proc = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code],
                          cwd=formats_project, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr


def test_int8_gives_the_same_outputs_on_avx2_kernels(formats_project, tmp_path):
    """The int8 model's outputs do not depend on the CPU's instruction set. valgrind offers
    programs AVX2 without AVX-512/VNNI, so onnxruntime picks its AVX2 kernels there; their
    u8 x s8 products saturate int16 with full 8-bit weights (a CI machine's int8 predictions
    once agreed with fp32 on 14 of 30 images), so weights are quantized to 7 bits."""
    import shutil

    if not shutil.which("valgrind"):
        missing_tool("valgrind", "apt-get install valgrind")
    code = (
        "import sys\n"
        "import numpy as np\n"
        "import onnxruntime as ort\n"
        "from stages.lib.data.shards import load_split\n"
        "x = np.ascontiguousarray(load_split('train')[0][0:128], dtype=np.float32)\n"
        "so = ort.SessionOptions()\n"
        "so.intra_op_num_threads = 1\n"
        "run = ort.InferenceSession('models/int8/model.int8.onnx', so,\n"
        "                           providers=['CPUExecutionProvider'])\n"
        "np.save(sys.argv[1], run.run(None, {'input': x})[0])\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    outs = {}
    for name, prefix in (("native", []), ("avx2", ["valgrind", "-q", "--tool=none"])):
        outs[name] = tmp_path / f"{name}.npy"
        proc = subprocess.run([*prefix, sys.executable, "-c", code, str(outs[name])],
                              cwd=formats_project, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
    native, avx2 = np.load(outs["native"]), np.load(outs["avx2"])
    assert native.shape == (128, 10)
    # identical on the machines checked (AVX-512 VNNI native); a CPU whose kernels round one
    # requantization otherwise may move a logit by a step or two, while saturation moved them
    # by up to 0.74 and changed 13.5% of the decisions
    assert (avx2.argmax(1) == native.argmax(1)).all()
    assert np.abs(avx2 - native).max() <= 0.05
