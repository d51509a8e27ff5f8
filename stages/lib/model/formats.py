"""The model formats the export stage writes, how each is made, and how each one runs.

`onnx_bytes` and `torchscript_bytes` export the PyTorch model (models/model.onnx,
models/torchscript/model.pt). Every other format is converted from the ONNX bytes the export
stage just proved against PyTorch, so it never sees the PyTorch model, and each runs through one
function: `runner(format, files)` gives `run(float32 NxCxHxW) -> first output`, the same contract
as onnxruntime's session (`onnx_session` builds that session for the stage and the tools alike).

- `openvino`: `ov.convert_model` on the ONNX file, saved as IR (model.xml + model.bin) with
  `compress_to_fp16=False`. The IR asks for f32 inference in its own rt_info
  (runtime_options/INFERENCE_PRECISION_HINT), and every runner here passes the same hint: on a
  CPU with AMX or avx512_bf16 OpenVINO would otherwise infer in bf16.
- `onnx_int8`: onnxruntime's static quantization in QDQ form, int8 weights per output channel,
  uint8 activations (the pair onnxruntime's x86 kernels are built for), MinMax calibration on a
  seeded sample of the train split.
- `tensorrt`: a TensorRT engine built from the ONNX model with FP16 allowed; only on a machine
  with a CUDA device (`cuda_device()`), else the stage records NO_CUDA.

Every import of a runtime stays inside a function: `--help` and the tools' onnxruntime path
never load OpenVINO, TensorRT or torch.
"""
import json
from pathlib import Path

from stages.lib.modality.spec import recipe_keys
from stages.lib.params import EXPORT_FORMATS as FORMATS  # noqa: F401 (parsed there)

# Each format's DVC out besides model.onnx: a folder, holding only NOTE when the format is not
# selected (DVC needs every declared out to exist after the stage, and warns on an empty one).
FOLDERS = {"torchscript": Path("models/torchscript"), "openvino": Path("models/openvino"),
           "onnx_int8": Path("models/int8"), "tensorrt": Path("models/tensorrt")}
FILES = {"torchscript": ("model.pt",), "openvino": ("model.xml", "model.bin"),
         "onnx_int8": ("model.int8.onnx",), "tensorrt": ("model.engine",)}
NOTE = "DISABLED.txt"  # what an unselected format's folder holds
NAMES = {"onnx": "ONNX (onnxruntime)", "openvino": "OpenVINO", "onnx_int8": "ONNX int8",
         "tensorrt": "TensorRT"}
NO_CUDA = "skipped: no CUDA device"
CALIBRATION_STREAM = 1  # the calibration sample's rng: default_rng([train.seed, this])
TRACED_OPSET = 17  # a model exported by tracing (export_batch below): RoIAlign needs >= 16


def disabled_note(fmt: str) -> bytes:
    """NOTE's text in the folder of a format that was not exported."""
    if fmt == "torchscript":  # export.torchscript, not export.formats, selects it
        return (b"export.torchscript is false, so no TorchScript model is exported; set it to "
                b"true for models/torchscript/model.pt.\n")
    return (f"{fmt} is not in export.formats (or its device is missing: see metrics/export.json)"
            f", so this folder holds no model; add it to export.formats to export it.\n").encode()


def import_openvino():
    """The openvino module, with its usage telemetry off.

    `import openvino` loads its converter, which starts openvino_telemetry: it writes a client
    id under ~/intel/ and sends an event over the network. Marking that package absent makes
    openvino take its own no-op stub (the path it takes when the package is not installed),
    so the pipeline stays offline and writes nothing outside the project."""
    import sys

    if "openvino" not in sys.modules:
        sys.modules.setdefault("openvino_telemetry", None)
    import openvino

    return openvino


# ---- export: the PyTorch model -> ONNX or TorchScript bytes


def export_batch(model) -> int:
    """0 (most models): model exports with torch.export (dynamo) and a dynamic batch axis.
    n > 0: a module of it says `export_batch = n` (torchvision's detectors: 1): it exports
    only by tracing (dynamo=False, opset 17) at a fixed batch size of n; the ONNX runners feed
    it n images at a time, and the other formats (TorchScript, OpenVINO, int8, TensorRT) are
    refused. Any module counts, so a model wrapped for export (export's test hook) still says
    it."""
    return next((m.export_batch for m in model.modules() if getattr(m, "export_batch", 0)), 0)


def onnx_bytes(model, meta, task, extra_metadata: dict | None = None) -> bytes:
    """Export to ONNX in memory; metadata holds everything a consumer needs to preprocess."""
    import warnings

    import onnx
    import torch

    from stages.lib.io import StageError, scratch_dir
    from stages.lib.model.onnx_clean import strip_source_paths

    example = torch.zeros(2, *task.modality.input_spec(meta))
    axes = {0: torch.export.Dim("batch")}
    if task.dynamic_width:  # any width that is a multiple of the task's stride
        axes[3] = task.dynamic_width * torch.export.Dim("width", min=1)
    fixed = export_batch(model)
    # the exporter writes only to a file: one in a scratch folder (a full TMPDIR: one line)
    with scratch_dir("export: the ONNX export") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = tmp / "model.onnx"
        if fixed:  # traced (torchvision's detectors): a seeded example, so it finds boxes
            example = torch.randn(fixed, *example.shape[1:],
                                  generator=torch.Generator().manual_seed(0))
            torch.onnx.export(model.eval(), (example,), str(path), input_names=["input"],
                              output_names=list(task.output_names), external_data=False,
                              verbose=False, dynamo=False, opset_version=TRACED_OPSET)
        else:
            torch.onnx.export(model.eval(), (example,), str(path), input_names=["input"],
                              output_names=list(task.output_names), external_data=False,
                              verbose=False, dynamic_shapes=(axes,))
        proto = onnx.load(str(path))
    strip_source_paths(proto)  # no absolute paths: the same bytes from any folder or venv
    keys = (*task.meta_keys, *recipe_keys(meta))  # the input spec as the model stores it
    metadata = {**{k: meta[k] for k in keys}, "task": task.name, **(extra_metadata or {})}
    for key in sorted(metadata):
        proto.metadata_props.add(key=key, value=json.dumps(metadata[key]))
    try:
        onnx.checker.check_model(proto, full_check=True)
    except onnx.checker.ValidationError as exc:
        raise StageError(f"export: the ONNX model fails onnx.checker: {exc}") from None
    return proto.SerializeToString()


def torchscript_bytes(model, meta, task) -> bytes:
    """A traced TorchScript module with the same preprocessing metadata as extra files."""
    import io
    import warnings

    import torch

    from stages.lib.model.onnx_clean import strip_torchscript_debug

    example = torch.zeros(2, *task.modality.input_spec(meta))
    buf = io.BytesIO()
    extra = {k: json.dumps(meta[k])
             for k in (*task.meta_keys, *recipe_keys(meta))}
    # Deterministic per process (the stage exports once); TorchScript's deprecation is silenced.
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(model.eval(), example), buf, _extra_files=extra)
    return strip_torchscript_debug(buf.getvalue())  # no absolute paths either


# ---- conversion: ONNX bytes -> {file name: bytes}


def convert(fmt: str, onnx_blob: bytes, *, calibration=None, max_batch: int = 64) -> dict:
    """The files of one format converted from the ONNX model: {file name: bytes}.
    calibration: float32 NxCxHxW inputs (onnx_int8); max_batch: the largest batch (tensorrt)."""
    if fmt == "openvino":
        return openvino_files(onnx_blob)
    if fmt == "onnx_int8":
        return {"model.int8.onnx": int8_bytes(onnx_blob, calibration)}
    if fmt == "tensorrt":
        return {"model.engine": tensorrt_engine(onnx_blob, max_batch)}
    raise ValueError(f"unknown format {fmt!r}")


def openvino_files(onnx_blob: bytes) -> dict:
    """model.xml and model.bin: OpenVINO IR of the ONNX model, weights kept in f32.

    The ONNX file is converted from a temp folder under a fixed name: the IR records the input
    file as DIR/model.onnx, so its bytes do not depend on where the stage runs."""
    from stages.lib.io import scratch_dir

    ov = import_openvino()
    with scratch_dir("export: the OpenVINO conversion") as tmp:
        src = Path(tmp) / "model.onnx"
        src.write_bytes(onnx_blob)
        model = ov.convert_model(str(src))
        model.set_rt_info("f32", ["runtime_options", "INFERENCE_PRECISION_HINT"])
        ov.save_model(model, str(Path(tmp) / "model.xml"), compress_to_fp16=False)
        return {name: (Path(tmp) / name).read_bytes() for name in FILES["openvino"]}


def calibration_indices(n: int, samples: int, seed: int):
    """The sorted indices of the calibration sample: `samples` of n train images (all when n
    is smaller), a pure function of (seed, n, samples)."""
    import numpy as np

    if samples >= n:
        return np.arange(n)
    rng = np.random.default_rng([seed, CALIBRATION_STREAM])
    return np.sort(rng.choice(n, size=samples, replace=False))


RANGE_BITS = 11  # significant bits kept of each calibrated bound, rounded outward


def outward(value: float, up: bool) -> float:
    """value rounded away from the inside of its range to RANGE_BITS significant bits."""
    import math

    if value == 0 or not math.isfinite(value):
        return float(value)
    grid = 2.0 ** (math.frexp(value)[1] - RANGE_BITS)
    return (math.ceil(value / grid) if up else math.floor(value / grid)) * grid


def portable_ranges(model_path, batches, augmented) -> dict:
    """MinMax ranges of every tensor onnxruntime calibrates, as TensorQuantOverrides, each bound
    rounded outward to RANGE_BITS significant bits. onnxruntime's float kernels differ per CPU
    (AVX2 against AVX-512 blocking) in the last bits of an activation's extremes; rounding keeps
    those bits out of the scales, so the int8 file is the same on every CPU unless a bound lies
    within a few ulps of a grid line (about 1 in 2,000 per bound)."""
    import numpy as np
    from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator

    calibrator = create_calibrator(model_path, None, augmented_model_path=str(augmented),
                                   calibrate_method=CalibrationMethod.MinMax)
    calibrator.collect_data(batches)
    data = calibrator.compute_data().data
    return {name: [{"rmin": np.float32(outward(float(np.ravel(r.range_value[0])[0]), False)),
                    "rmax": np.float32(outward(float(np.ravel(r.range_value[1])[0]), True))}]
            for name, r in sorted(data.items())}


def int8_bytes(onnx_blob: bytes, calibration, batch_size: int = 64) -> bytes:
    """onnxruntime static QDQ quantization of the ONNX model, calibrated (MinMax) on
    `calibration`, float32 NxCxHxW. The same model and inputs give the same bytes: MinMax keeps
    exact extremes, onnxruntime's CPU kernels do not split one output's sum across threads
    (checked: the same bytes on 1 and on all cores), and the ranges are rounded outward
    (portable_ranges) so another CPU's last bits do not reach the scales.

    Weights use 7 of their 8 bits (reduce_range): onnxruntime's AVX2 kernels multiply u8
    activations by s8 weights with VPMADDUBSW, whose int16 pair sums saturate at full range, so
    the same model gave other outputs on an AVX2-only CPU than on one with AVX-512 VNNI (top-1
    agreement 0.865 on 200 images, against 1.0 and identical outputs with reduce_range)."""
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod,
                                          QuantFormat, QuantType, quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Batches(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"input": calibration[i:i + batch_size]}
                                 for i in range(0, len(calibration), batch_size)])

        def get_next(self):
            return next(self.batches, None)

    from stages.lib.io import scratch_dir

    with scratch_dir("export: the int8 quantization") as tmp:
        src, pre, out = (str(Path(tmp) / n) for n in ("model.onnx", "pre.onnx", "int8.onnx"))
        Path(src).write_bytes(onnx_blob)
        quant_pre_process(src, pre)  # shape inference and graph fusions before quantizing
        ranges = portable_ranges(pre, Batches(), Path(tmp) / "augmented.onnx")
        quantize_static(pre, out, Batches(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        reduce_range=True, calibrate_method=CalibrationMethod.MinMax,
                        extra_options={"TensorQuantOverrides": ranges})
        proto = onnx.load(out)
    proto.metadata_props.add(key="quantization", value=json.dumps(
        {"format": "QDQ", "weights": "int8 per channel, 7-bit range", "activations": "uint8",
         "calibration": "MinMax", "calibration_samples": len(calibration)}))
    return proto.SerializeToString()


def tensorrt_engine(onnx_blob: bytes, max_batch: int) -> bytes:
    """A serialized TensorRT engine of the ONNX model (FP16 kernels allowed), for batch sizes
    1 to max_batch. Engines are specific to the GPU and TensorRT version that built them, and
    builds pick kernels by timing: two builds may differ in bytes."""
    from stages.lib.io import StageError

    try:
        import tensorrt as trt
    except ImportError:
        raise StageError("export.formats lists tensorrt and a CUDA device is here, but the "
                         "tensorrt package is not installed: pip install tensorrt-cu13 (the "
                         "CUDA 13 build that matches torch), or drop tensorrt from "
                         "export.formats.") from None
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch: the only mode since TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_blob):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise StageError(f"export: TensorRT cannot parse the ONNX model: {errors}")
    config = builder.create_builder_config()
    if hasattr(trt.BuilderFlag, "FP16"):
        config.set_flag(trt.BuilderFlag.FP16)
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        rest = tuple(tensor.shape)[1:]
        profile.set_shape(tensor.name, (1, *rest), (max_batch, *rest), (max_batch, *rest))
    config.add_optimization_profile(profile)
    engine = builder.build_serialized_network(network, config)
    if engine is None:
        raise StageError("export: TensorRT could not build an engine from the ONNX model "
                         "(its log above says why).")
    return bytes(engine)


# ---- running: {file name: bytes} or a path -> run(x) -> first output


def cuda_device() -> bool:
    """Whether a CUDA device is there for TensorRT (torch's view: the stage has torch)."""
    import torch

    return torch.cuda.is_available()


def runner(fmt: str, files: dict, threads: int = 0):
    """run(float32 NxCxHxW numpy) -> the model's first output (numpy) for a format's files."""
    if fmt in ("onnx", "onnx_int8"):
        (blob,) = files.values()
        return onnx_runner(blob, threads)
    if fmt == "openvino":
        return openvino_runner(files["model.xml"], files["model.bin"], threads)
    if fmt == "tensorrt":
        return tensorrt_runner(files["model.engine"])
    raise ValueError(f"unknown format {fmt!r}")


def onnx_session(model, threads: int = 0):
    """An onnxruntime session on CPU; model: bytes or a path (threads: its intra-op pool;
    0 = onnxruntime's default)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), opts,
                                providers=["CPUExecutionProvider"])


def onnx_runner(model, threads: int = 0):
    """onnxruntime on CPU; model: bytes or a path."""
    return batched(onnx_session(model, threads))


def torchscript_module(blob: bytes):
    """The TorchScript module of torchscript_bytes, on CPU (run it with
    stages.lib.model.models.predict_outputs)."""
    import io

    import torch

    return torch.jit.load(io.BytesIO(blob), map_location="cpu")


def batched(session):
    """run(x) -> the session's first output; a graph with a fixed batch size (a traced
    torchvision detector: 1) is fed that many images at a time."""
    import numpy as np

    first = session.get_outputs()[0].name
    fixed = session.get_inputs()[0].shape[0]
    fixed = fixed if isinstance(fixed, int) and fixed > 0 else 0

    def run(x):
        if not fixed or len(x) == fixed:
            return session.run([first], {"input": x})[0]
        return np.concatenate([session.run([first], {"input": x[i:i + fixed]})[0]
                               for i in range(0, len(x), fixed)])

    return run


def openvino_model(xml, weights=None):
    """(openvino module, ov.Model) from IR bytes (xml, weights) or a path to model.xml."""
    ov = import_openvino()
    core = ov.Core()
    if isinstance(xml, bytes):
        import numpy as np

        return ov, core, core.read_model(xml, ov.Tensor(np.frombuffer(weights, np.uint8)))
    return ov, core, core.read_model(str(xml))


def openvino_runner(xml, weights=None, threads: int = 0):
    """OpenVINO's CPU plugin in f32 (never bf16 or f16), on IR bytes or a model.xml path."""
    ov, core, model = openvino_model(xml, weights)
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = threads
    compiled = core.compile_model(model, "CPU", config)
    request = compiled.create_infer_request()
    first = compiled.outputs[0]

    def run(x):
        return request.infer({0: x})[first].copy()  # the request reuses its output buffer

    return run


def openvino_metadata(xml) -> dict:
    """The ONNX model's metadata the IR carries (rt_info `framework`): {key: JSON string}."""
    _, _, model = openvino_model(xml, None)
    info = model.get_rt_info()
    framework = info["framework"] if "framework" in info else {}
    return {key: framework[key].astype(str) for key in framework}


def tensorrt_runner(engine_blob: bytes):
    """TensorRT's runtime on the first CUDA device; tensors live in torch CUDA memory."""
    import numpy as np
    import tensorrt as trt
    import torch

    engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(engine_blob)
    context = engine.create_execution_context()
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
    dtypes = {trt.float32: torch.float32, trt.float16: torch.float16, trt.int32: torch.int32,
              trt.int64: torch.int64, trt.bool: torch.bool}
    stream = torch.cuda.Stream()

    def run(x):
        with torch.cuda.stream(stream):
            batch = torch.from_numpy(np.ascontiguousarray(x)).to("cuda")
            context.set_input_shape(inputs[0], tuple(batch.shape))
            context.set_tensor_address(inputs[0], batch.data_ptr())
            results = []
            for name in outputs:
                out = torch.empty(tuple(context.get_tensor_shape(name)),
                                  dtype=dtypes[engine.get_tensor_dtype(name)], device="cuda")
                context.set_tensor_address(name, out.data_ptr())
                results.append(out)
            if not context.execute_async_v3(stream.cuda_stream):
                raise RuntimeError("TensorRT failed to run the engine")
        stream.synchronize()
        return results[0].float().cpu().numpy()

    return run


def outputs(run, x, batch_size: int):
    """run over a (lazy) N x ... input, batch_size items at a time: the concatenated outputs."""
    import numpy as np

    return np.concatenate([run(np.ascontiguousarray(x[i:i + batch_size], dtype=np.float32))
                           for i in range(0, len(x), batch_size)])


# ---- the test hook's perturbed conversion


def shifted_onnx(onnx_blob: bytes, shift: float) -> bytes:
    """The ONNX model with `input + shift` in front of its graph: a conversion that went wrong
    the way a normalisation mismatch does (stages/lib/hooks.py EXPORT_FORMAT_SHIFT)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    proto = onnx.load_from_string(onnx_blob)
    graph = proto.graph
    name = graph.input[0].name
    for node in graph.node:
        node.input[:] = ["shifted_input" if i == name else i for i in node.input]
    graph.initializer.append(numpy_helper.from_array(np.array(shift, np.float32), "test_shift"))
    graph.node.insert(0, helper.make_node("Add", [name, "test_shift"], ["shifted_input"]))
    return proto.SerializeToString()
