"""Make an exported ONNX model independent of the folder the project and its Python live in.

torch.onnx.export (the dynamo exporter) records, for every node, the Python stack trace that
produced it in the node's metadata (`pkg.torch.onnx.stack_trace`): `File "/abs/venv/lib/
python3.11/site-packages/torch/nn/modules/conv.py", line 548, in forward ...`, and frames of the
project's own code (`/abs/project/stages/lib/model/models.py`) for modules defined there. Those
absolute paths made models/model.onnx, a DVC-cached out, differ between two clones of the same
commit at different paths or with their virtualenv at different paths, so `dvc repro` in a fresh
clone could not reproduce the model.onnx (and reports/run.html, which hashes it) in dvc.lock.
The older TorchScript-based exporter puts the same kind of source location in node doc_strings.

`strip_source_paths` removes that debugging information. Nothing it removes has any effect on
inference (runtimes ignore metadata and doc strings), and it runs before onnx.checker.
`strip_torchscript_debug` does the same for a TorchScript archive (`export.torchscript: true`).
"""


def is_source_key(key: str) -> bool:
    """A metadata key holding source locations (file paths, line numbers, source lines):
    `pkg.torch.onnx.stack_trace`, or any other key naming a stack trace."""
    return "stack_trace" in key


def strip_source_paths(proto) -> None:
    """Remove source locations from an onnx.ModelProto, in place and deterministically.

    Everywhere below the model itself (the graph, every node, value_info, input, output,
    initializer, sub-graphs in node attributes, and local functions):
    - every `metadata_props` entry whose key names a source location (`is_source_key`, e.g.
      `pkg.torch.onnx.stack_trace`) is deleted;
    - every `doc_string` is cleared (exporters put source locations there; a doc string is
      documentation only).
    The other exporter metadata (module names and scopes, `pkg.torch.onnx.fx_node`, the export
    graph signature) holds no path and stays, so tools like Netron can still map nodes to
    modules. The model-level `metadata_props` and `doc_string`, where the project puts its own
    metadata, are left as they are.
    """

    def clean(message) -> None:
        for field, value in message.ListFields():
            if field.name == "metadata_props":
                for i in reversed(range(len(value))):
                    if is_source_key(value[i].key):
                        del value[i]
            elif field.name == "doc_string":
                message.ClearField("doc_string")
            elif field.type == field.TYPE_MESSAGE:
                for item in (value if field.is_repeated else [value]):
                    clean(item)

    for field, value in proto.ListFields():
        if field.type == field.TYPE_MESSAGE and field.name != "metadata_props":
            for item in (value if field.is_repeated else [value]):
                clean(item)


def strip_torchscript_debug(blob: bytes) -> bytes:
    """A torch.jit.save archive without its `*.debug_pkl` records, rewritten by torch's own
    archive writer (same records, order and alignment otherwise).

    TorchScript keeps each module's source ranges, with the absolute path of the file that
    defined it (torch's own modules under the virtualenv's site-packages), in
    `code/**/*.py.debug_pkl`: the same leak as the ONNX stack traces, in
    models/torchscript/model.pt. torch.jit.load does not need them (they only annotate error
    messages with Python source lines) and the loaded module computes exactly the same.
    `.data/serialization_id`, a hash of the records, is recomputed by the writer.
    """
    import io

    import torch

    reader = torch._C.PyTorchFileReader(io.BytesIO(blob))
    out = io.BytesIO()
    writer = torch._C.PyTorchFileWriter(out)
    for name in reader.get_all_records():
        if name.endswith(".debug_pkl") or name == ".data/serialization_id":
            continue
        data = reader.get_record(name)
        writer.write_record(name, data, len(data))
    writer.write_end_of_file()
    return out.getvalue()
