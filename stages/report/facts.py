"""Everything the run report shows, read once into one Facts object.

Every path the report reads is defined here, and `gather` reads each file exactly once: the
manifest is hashed and its rows counted in one streaming pass, the ONNX model is hashed from the
bytes it is parsed from, requirements.lock is hashed from the text its pins are read from, the
params file is read once for all sections, and every .py file under stages/ is hashed once.
The sections then only format these facts.
"""
import csv
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

from stages.lib.io import StageError, read_csv, read_json

OUT = Path("reports/run.html")
EXPERIMENTS_OUT = Path("reports/experiments.html")
VALIDATION_HTML = Path("reports/validation.html")
MANIFEST = Path("data/manifest.csv")
QUARANTINE = Path("data/quarantine.csv")
VALIDATION = Path("metrics/validation.json")
VALIDATION_CHECKS = Path("metrics/validation_checks.json")  # {check: count}
SPLIT = Path("metrics/split.json")
CURVES = Path("plots/train/plots/metrics")
TRAIN = Path("metrics/train.json")
EVAL = Path("metrics/eval.json")
EVAL_DIR = Path("plots/eval")  # the task's evaluation files
EXPORT = Path("metrics/export.json")
ONNX = Path("models/model.onnx")
LOCK = Path("requirements.lock")
CODE_DIR = Path("stages")
# Versions shown in the environment table (distribution names, as in requirements.lock).
KEY_PACKAGES = ("torch", "torchvision", "numpy", "pillow", "scikit-learn", "onnx",
                "onnxruntime", "dvc", "dvclive", "great-expectations", "matplotlib")
CHUNK = 1 << 20


@dataclass(frozen=True)
class Facts:
    out: Path  # where the page goes: its links are relative to it
    manifest_sha256: str
    manifest_rows: int
    quarantined: int
    validation: dict  # metrics/validation.json, with "checks" from metrics/validation_checks.json
    split: dict  # metrics/split.json's counts per split and class
    curves: dict  # {metric: {series: [(step, value)]}}
    train: dict  # metrics/train.json
    eval: dict  # metrics/eval.json
    eval_files: dict  # {name: bytes} of every file under plots/eval/ (the task parses them)
    task: str  # the run's task (params.yaml `task`)
    export: dict  # metrics/export.json
    onnx: dict  # onnx_facts
    params_rows: list  # [(section.key, value, default)]
    params_sha256: str
    code_sha256: str
    code_files: list  # [(path, sha256)]
    lock_sha256: str
    lock_versions: dict  # {normalised name: version}
    installed: dict  # {name: version or ""}
    python: str
    checks: dict  # {name: (kind, description)} of every validate check of the run's task
    split_checks: dict | None = None  # metrics/split.json's balance and leakage findings
    git: dict | None = None  # only for the (untracked) experiments page
    experiments: list | None = None  # `dvc exp show --json`, likewise
    # logs/export.json's parity figures (they differ per CPU in the last bits), likewise
    measured: dict | None = None
    # what the page calls the task's inputs (its modality's WORDS) and the stored input in
    # words (its describe)
    words: tuple = (("item", "image"), ("items", "images"))
    inputs: str = ""
    meta_labels: tuple = ()  # (stored key, label): the modality's META_LABELS

    def word(self, key: str) -> str:
        """"image"/"clip" (item) or "images"/"clips" (items): the run's inputs."""
        return dict(self.words)[key]


def gather(params_path, out: Path, task, git: dict | None = None,
           experiments: list | None = None, measured: dict | None = None,
           raw: dict | None = None, hidden=()) -> Facts:
    """Read every input of the page, each file once (a missing file is named in the order
    the page uses them: the model first). task: the run's (the stage looks it up); raw: the
    params file as the stage's door read it (read here when not given); hidden: keys not
    shown at their defaults (other tasks' and modalities' own keys)."""
    import platform

    from stages.lib.checks import all_checks
    from stages.lib.params import read

    raw_params = raw if raw is not None else read(params_path)
    onnx = onnx_facts()
    headline, export, split = read_json(EVAL), read_json(EXPORT), read_json(SPLIT)
    split_checks = {k: split[k] for k in ("balance", "leakage") if k in split}
    split = {k: v for k, v in split.items() if k in ("train", "val", "test")}  # counts
    manifest_sha, manifest_rows = manifest_facts()
    code_total, code_files = code_hashes()
    params_rows, params_sha = params_facts(raw_params, params_path, hidden)
    installed = installed_versions()
    lock_sha, pins = lock_facts()
    validation = {**read_json(VALIDATION), "checks": read_json(VALIDATION_CHECKS)}
    quarantined = len(read_csv(QUARANTINE))
    curves, train = read_curves(), read_json(TRAIN)
    eval_files = {p.name: p.read_bytes() for p in sorted(EVAL_DIR.glob("*")) if p.is_file()}
    return Facts(
        out=Path(out), manifest_sha256=manifest_sha, manifest_rows=manifest_rows,
        quarantined=quarantined, validation=validation, split=split, split_checks=split_checks,
        curves=curves, train=train,
        eval=headline, eval_files=eval_files, task=task.name, export=export, onnx=onnx,
        params_rows=params_rows,
        params_sha256=params_sha, code_sha256=code_total, code_files=code_files,
        lock_sha256=lock_sha, lock_versions=pins, installed=installed,
        python=platform.python_version(), checks=all_checks(task), git=git,
        experiments=experiments, measured=measured,
        words=tuple(task.modality.WORDS.items()),
        meta_labels=tuple(task.modality.META_LABELS.items()),
        inputs=task.modality.describe(onnx["metadata"]) if "image_size" in onnx["metadata"]
        else "?")


# ---------------------------------------------------------------- readers


def not_found(path) -> StageError:
    return StageError(f"{path} not found: run the stage that writes it first (`dvc repro`).")


def eval_file(facts: Facts, name: str):
    """A file evaluate wrote to plots/eval/, parsed (JSON or CSV rows) from the facts' bytes."""
    if name not in facts.eval_files:
        raise not_found(EVAL_DIR / name)
    text = facts.eval_files[name].decode("utf-8")
    return json.loads(text) if name.endswith(".json") else list(csv.DictReader(io.StringIO(text)))


def read_bytes(path) -> bytes:
    path = Path(path)
    if not path.is_file():
        raise not_found(path)
    return path.read_bytes()


class _Hashing(io.RawIOBase):
    """A binary file that hashes every byte read through it."""

    def __init__(self, f):
        self.f, self.digest = f, hashlib.sha256()

    def readable(self):
        return True

    def readinto(self, buf):
        n = self.f.readinto(buf)
        if n:
            self.digest.update(memoryview(buf)[:n])
        return n


def manifest_facts(path=MANIFEST) -> tuple[str, int]:
    """(sha256, rows) of the manifest in one streaming pass: it grows with the data."""
    path = Path(path)
    if not path.is_file():
        raise not_found(path)
    with open(path, "rb") as f:
        hashing = _Hashing(f)
        text = io.TextIOWrapper(io.BufferedReader(hashing, CHUNK), encoding="utf-8", newline="")
        reader = csv.reader(text)
        next(reader, None)  # the header
        rows = sum(1 for row in reader if row)  # csv.DictReader skips blank rows too
        while hashing.read(CHUNK):  # the csv reader stops at EOF; make sure of it
            pass
    return hashing.digest.hexdigest(), rows


def code_hashes(root=CODE_DIR) -> tuple[str, list[tuple[str, str]]]:
    """sha256 of every .py file of the pipeline's code (sorted), and one hash over them all."""
    from stages.lib.io import sha256_file

    from stages.lib.model.provenance import ROOT

    base = ROOT / root  # the code of the root, also for a pipeline under pipelines/NAME/
    files = sorted((Path(root) / p.relative_to(base)).as_posix() for p in base.rglob("*.py")
                   if "__pycache__" not in p.parts)
    pairs = [(f, sha256_file(ROOT / f, missing="")) for f in files]
    total = hashlib.sha256("".join(f"{f}\0{h}\n" for f, h in pairs).encode()).hexdigest()
    return total, pairs


def lock_facts(path=LOCK) -> tuple[str, dict[str, str]]:
    """sha256 of requirements.lock and {normalised name: version} of its `name==version` lines
    (the root's, also for a pipeline under pipelines/NAME/)."""
    from stages.lib.model.provenance import ROOT

    data = read_bytes(ROOT / path)
    return hashlib.sha256(data).hexdigest(), lock_versions(data.decode("utf-8"))


def lock_versions(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        name, sep, version = line.split("#")[0].strip().partition("==")
        if sep:
            pins[normalise(name)] = version.strip()
    return pins


def normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed_versions(names=KEY_PACKAGES) -> dict[str, str]:
    from importlib import metadata

    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = ""
    return versions


def params_facts(raw: dict, params_path, hidden=()) -> tuple[list[tuple[str, object, object]],
                                                              str]:
    """[(section.key, value, default)] for every key of every section in declaration order
    (but those of hidden at their defaults), and the params hash (sha256 over every section's
    hash, every key counted), from one read of the file."""
    import dataclasses

    from stages.lib.params import SECTIONS, parse_all, without_placement
    from stages.lib.model.provenance import params_hash

    values = parse_all(raw, params_path)
    rows = []
    for section, cls in SECTIONS.items():
        defaults = cls()
        for field in dataclasses.fields(cls):
            value = getattr(values[section], field.name)
            # where prepare ran, and another modality's keys at their defaults: not shown
            key, default = f"{section}.{field.name}", getattr(defaults, field.name)
            if without_placement(section, {field.name: value}) and not (
                    key in hidden and value == default):
                rows.append((f"{section}.{field.name}", getattr(values[section], field.name),
                             getattr(defaults, field.name)))
    digest = params_hash({section: params_hash(without_placement(
        section, dataclasses.asdict(values[section]))) for section in SECTIONS})
    return rows, digest


def read_curves(root=CURVES) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """{metric: {series: [(step, value)]}} from every dvclive tsv under root.

    plots/train/plots/metrics/val/loss.tsv is series "val" of metric "loss"; a tsv at the top
    (lr.tsv) is its own series. The value column is the one named after the file (or the first
    that is not step/timestamp)."""
    root = Path(root)
    files = sorted(root.rglob("*.tsv"))
    if not files:
        raise StageError(f"no training curves (*.tsv) under {root}: run the train stage first "
                         "(`dvc repro train`).")
    curves: dict[str, dict] = {}
    for path in files:
        rel = path.relative_to(root).with_suffix("")
        metric, series = rel.name, "/".join(rel.parts[:-1]) or rel.name
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        columns = [c for c in (rows[0] if rows else {}) if c not in ("step", "timestamp")]
        column = metric if metric in columns else (columns[0] if columns else None)
        if column is None or any("step" not in r for r in rows):
            raise StageError(f"{path}: expected a dvclive tsv with a `step` column and a value "
                             "column; delete it or re-run the train stage.")
        try:
            points = [(float(r["step"]), float(r[column])) for r in rows]
        except ValueError as exc:
            raise StageError(f"{path}: not a number in the `step` or `{column}` column ({exc}); "
                             "re-run the train stage.") from exc
        curves.setdefault(metric, {})[series] = points
    return curves


def onnx_facts(path=ONNX) -> dict:
    """Size, hash, graph signature and decoded metadata of the exported model (one read)."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise StageError(f"{path} not found: run the export stage first (`dvc repro export`).")
    data = path.read_bytes()
    model = onnx.load_model_from_string(data)

    def signature(values):
        out = []
        for v in values:
            dims = [d.dim_param or str(d.dim_value) for d in v.type.tensor_type.shape.dim]
            out.append(f"{v.name} [{', '.join(dims)}]")
        return out

    meta = {}
    for prop in model.metadata_props:
        try:
            meta[prop.key] = json.loads(prop.value)
        except ValueError:
            meta[prop.key] = prop.value
    parameters, macs = onnx_cost(model)
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "parameters": parameters, "macs": macs,
            "ir_version": model.ir_version, "producer": f"{model.producer_name} "
            f"{model.producer_version}".strip(),
            "opsets": sorted(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import),
            "inputs": signature(model.graph.input), "outputs": signature(model.graph.output),
            "metadata": dict(sorted(meta.items()))}


def onnx_cost(model) -> tuple[int, int | None]:
    """(parameters, multiply-adds for one input) of an ONNX graph: the float initializers'
    elements, and over its Conv, ConvTranspose, Gemm and MatMul nodes the output's elements
    times each one's reduction length, with shapes inferred at batch 1. The multiply-adds are
    None when another input dimension is dynamic (a line's width): the cost depends on it."""
    import math

    import onnx
    from onnx import TensorProto, shape_inference

    floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    parameters = sum(math.prod(t.dims) for t in model.graph.initializer
                     if t.data_type in floats)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for value in probe.graph.input:
        for k, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.dim_param and k > 0:
                return parameters, None
            if dim.dim_param:
                dim.Clear()
                dim.dim_value = 1
    graph = shape_inference.infer_shapes(probe).graph
    shapes = {v.name: [d.dim_value if d.HasField("dim_value") else None
                       for d in v.type.tensor_type.shape.dim]
              for v in (*graph.input, *graph.value_info, *graph.output)}
    shapes.update(weights)
    macs = 0
    for node in graph.node:
        if node.op_type not in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
            continue
        out, a, b = (shapes.get(node.output[0]), shapes.get(node.input[0]),
                     shapes.get(node.input[1]))
        if not out or not a or not b or None in out + a + b:
            return parameters, None
        if node.op_type == "Conv":
            macs += math.prod(out) * math.prod(b[1:])
        elif node.op_type == "ConvTranspose":
            macs += math.prod(a) * math.prod(b[1:])
        else:
            trans_a = any(x.name == "transA" and x.i for x in node.attribute)
            macs += math.prod(out) * (a[-2] if trans_a else a[-1])
    return parameters, macs


def dvc_exp_show() -> list:
    """`dvc exp show --json` of the project in the working directory."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "dvc", "exp", "show", "--json"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise StageError(f"`dvc exp show --json` failed:\n{proc.stderr.strip()}")
    try:
        return json.loads(proc.stdout)
    except ValueError as exc:
        raise StageError(f"`dvc exp show --json` printed no JSON ({exc}):\n{proc.stdout[:500]}") \
            from exc
