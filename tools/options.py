"""The model options predict and serve share, each defined once with one help text.

`--max-pixels` (images) and `--max-seconds` (sounds) default to the pipeline's own
`validate.max_pixels` and `validate.max_seconds` (read from ./params.yaml when the tool runs), so
the tools never refuse an input the pipeline would train on, nor decode one it refuses. Only
click and the params module (PyYAML) are imported: `--help` stays instant.
"""
from pathlib import Path

import click

from stages.lib.modality.audiospec import MAX_SECONDS
from stages.lib.params import MAX_BEAM, MAX_PIXELS, PARAMS_FILE

BACKENDS = ("onnxruntime", "torch", "openvino")
MAX_PIXELS_ORIGIN = f"validate.max_pixels of ./{PARAMS_FILE}, else {MAX_PIXELS}"
MAX_SECONDS_ORIGIN = f"validate.max_seconds of ./{PARAMS_FILE}, else {MAX_SECONDS:g}"


def default_limit(key: str, fallback, option: str, params_path=PARAMS_FILE):
    """validate.<key> of params_path (relative to the working directory) when the file exists
    and is valid, else the pipeline's default (fallback). A file that exists but cannot be
    used is named in a warning on stderr, never ignored silently."""
    from stages.lib.params import load

    path = Path(params_path)
    if not path.is_file():
        return fallback
    try:
        value = getattr(load("validate", path), key)
        if value <= 0:
            raise ValueError(f"validate.{key} is {value}, not a positive limit")
    except Exception as exc:  # noqa: BLE001 - any unusable file means the same fallback
        message = getattr(exc, "message", None) or str(exc)
        click.echo(f"warning: {path}: {message}\n  {option} defaults to {fallback}; "
                   f"fix {path} or pass {option}.", err=True)
        return fallback
    return value


def default_max_pixels(params_path=PARAMS_FILE) -> int:
    """`validate.max_pixels` of params_path, else stages.lib.params.MAX_PIXELS."""
    return default_limit("max_pixels", MAX_PIXELS, "--max-pixels", params_path)


def default_max_seconds(params_path=PARAMS_FILE) -> float:
    """`validate.max_seconds` of params_path, else the audio modality's MAX_SECONDS."""
    return default_limit("max_seconds", MAX_SECONDS, "--max-seconds", params_path)


def check_beam(ctx, param, value):
    """--beam's bound, stages.lib.params.MAX_BEAM: the search's time grows about as K squared."""
    if value is not None and value > MAX_BEAM:
        raise click.BadParameter(f"{value} is too wide: K is at most {MAX_BEAM} (the search "
                                 f"takes about K squared steps per frame); pass --beam "
                                 f"{MAX_BEAM} or less (5 is usually enough).",
                                 param_hint="'--beam'")
    return value


SEVERAL_HELP = ("Model file, or a registered model: NAME@v1.2.0, NAME#prod (the version a stage "
                "points at) or NAME (the latest version), fetched once into the model cache and "
                "hash-checked before every load (docs/registry.md). Give it once per model to "
                "serve several (registered ones, each at POST /predict/NAME). Default: "
                "models/model.onnx (onnxruntime), models/model.pt (torch) or "
                "models/openvino/model.xml (openvino).")

def not_empty(ctx, param, value):
    """An empty --model or --registry (an unset variable in a script: `--model "$MODEL"`) is
    a usage error, not the default."""
    for one in value if isinstance(value, tuple) else (value,):
        if one is not None and not str(one).strip():
            raise click.BadParameter("is empty (an unset variable?): give a model file or a "
                                     "registered name (NAME#prod), or leave the option out "
                                     "for the default" if param.name == "model_path" else
                                     "is empty (an unset variable?): give the registry's "
                                     "path or URL, or leave it out for this repository")
    return value


_MODEL_OPTIONS = [
    click.option("--model", "model_path", type=click.Path(dir_okay=False), default=None,
                 callback=not_empty,
                 help="Model file, or a registered model: NAME@v1.2.0, NAME#prod (the version "
                      "a stage points at) or NAME (the latest version), fetched once into the "
                      "model cache and hash-checked before every load (docs/registry.md). "
                      "Default: models/model.onnx (onnxruntime), models/model.pt (torch) or "
                      "models/openvino/model.xml (openvino). The int8 model: "
                      "models/int8/model.int8.onnx with onnxruntime."),
    click.option("--registry", default=None, metavar="GIT_URL", callback=not_empty,
                 help="The git repository (a path or any URL git clone takes) whose registry "
                      "--model NAME... is looked up in. Default: the one the working "
                      "directory is in."),
    click.option("--backend", type=click.Choice(BACKENDS), default="onnxruntime",
                 show_default=True, help="onnxruntime runs an .onnx file without torch; torch "
                                         "runs model.pt in PyTorch eager mode; openvino runs "
                                         "the OpenVINO IR (export.formats) in f32."),
    click.option("--threads", type=click.IntRange(min=0), default=0, show_default=True,
                 help="Inference threads; 0 = the library's default (all cores)."),
    click.option("--max-pixels", type=click.IntRange(min=1), default=default_max_pixels,
                 show_default=MAX_PIXELS_ORIGIN,
                 help="Largest image (width x height, read from its header) accepted; a larger "
                      "one is refused before it is decoded, as the pipeline's validate stage "
                      "refuses it."),
    click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True),
                 default=default_max_seconds, show_default=MAX_SECONDS_ORIGIN,
                 help="Sound models: the longest clip (seconds, read from its header) accepted "
                      f"(at most {MAX_SECONDS:g}); a longer one is refused before it is decoded, "
                      "as the pipeline's ingest refuses it."),
    click.option("--top-k", type=click.IntRange(min=1), default=3, show_default=True,
                 help="Classes listed per image in `topk`, best first."),
    click.option("--score-threshold", type=click.FloatRange(0, 1), default=None,
                 help="Detection: keep boxes scoring at least this. Default: 0.3."),
    click.option("--beam", type=click.IntRange(min=1), default=None, metavar="K",
                 callback=check_beam,
                 help="Models that decode a sequence (text recognition): CTC prefix beam "
                      "search keeping the K most probable prefixes per frame, instead of the "
                      "default greedy best path; K=1 is greedy. Its confidence is P(text | "
                      "image), summed over the paths the beam kept. Slower (5-10 ms a line "
                      f"at K=5). K is at most {MAX_BEAM}. Refused for a model whose task "
                      f"has no beam search."),
    click.option("--min-confidence", type=click.FloatRange(0, 1), default=None, metavar="C",
                 help="Models that decode a sequence (text recognition, speech): a line whose "
                      "confidence is below C is answered with uncertain: true (its text is "
                      "still given). Default: never uncertain. Refused for a model whose task "
                      "has no line confidence."),
]


def model_options(func=None, *, several: bool = False):
    """Add --model, --registry, --backend, --threads, --max-pixels, --max-seconds, --top-k,
    --score-threshold, --beam and --min-confidence (parameters model_path, registry, backend,
    threads, max_pixels, max_seconds, top_k, score_threshold, beam, min_confidence) to a click
    command, in that order. several: --model may be given more than once (model_path is then a
    tuple)."""
    def add(func):
        options = list(_MODEL_OPTIONS)
        if several:
            options[0] = click.option("--model", "model_path", multiple=True, callback=not_empty,
                                      metavar="MODEL", help=SEVERAL_HELP)
        for option in reversed(options):
            func = option(func)
        return func
    return add(func) if func is not None else add


def apply_decode_options(model, score_threshold=None, beam=None, min_confidence=None) -> None:
    """Hand the decoding options given on the command line to the model's task, through
    model.meta (what task.decode reads). An option the task does not declare in its
    decode_options is a usage error (--score-threshold keeps its older rule: always passed)."""
    if score_threshold is not None:
        model.meta["score_threshold"] = score_threshold
    if beam is not None:
        if "beam" not in model.task.decode_options:
            raise click.UsageError(f"--beam: the model's task ({model.task.name}) has no beam "
                                   f"search; leave --beam out.")
        model.meta["beam"] = beam
    if min_confidence is not None:
        if "min_confidence" not in model.task.decode_options:
            raise click.UsageError(f"--min-confidence: the model's task ({model.task.name}) "
                                   f"has no line confidence; leave --min-confidence out.")
        model.meta["min_confidence"] = min_confidence
