"""Issue 57, items 3 and 5: serve speaks the served model's modality, bad input has one
modality-neutral set of kinds whose HTTP statuses are written once (errors.KINDS), and
tools/serve is one config and one predict handler with no function over 60 lines.

Real servers (tools.serve in its own process, on a free loopback port) over tiny ONNX models
written with onnx's helper (no training): test_hardening4_audio's audio classifier, a speech
model of the same input, and fake_registry's 8x8 image classifier.
"""
import ast
import io
import json
import re
import struct
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from stages.lib.modality.errors import KINDS, MIXED_STATUS, STATUS, BadInput
from tests.conftest import ROOT, serving
from tests.test_hardening4_audio import SPEC, audio_model, tone  # noqa: F401 - its fixture

SERVE = ROOT / "tools/serve"
BAD_INPUT_STATUSES = set(STATUS.values()) | {MIXED_STATUS}


@pytest.fixture(scope="module")
def speech_model(tmp_path_factory):
    """A tiny speech model (log-mel input as the audio model's; per frame, logits favouring
    the charset's first character), with the export stage's metadata."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    charset = list("ab ")
    bias = np.zeros(1 + len(charset), np.float32)
    bias[1] = 4.0
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["input", "shape"], ["mels"]),
         helper.make_node("Transpose", ["mels"], ["frames"], perm=[0, 2, 1]),
         helper.make_node("MatMul", ["frames", "w"], ["mm"]),
         helper.make_node("Add", ["mm", "b"], ["logits"])],
        "speech", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 1, 40, 101])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 101, len(bias)])],
        [numpy_helper.from_array(np.array([0, 40, 101], np.int64), "shape"),
         numpy_helper.from_array(np.zeros((40, len(bias)), np.float32), "w"),
         numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for key, value in {"task": "speech", **SPEC.to_meta(), "charset": charset, "blank": 0,
                       "max_len": 8}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, json.dumps(value)
    path = tmp_path_factory.mktemp("speech_model") / "speech.onnx"
    onnx.save(model, str(path))
    return path


def png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8), 128, np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def wav_bytes(samples, rate=16000, subtype=None) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format="WAV", subtype=subtype)
    return buf.getvalue()


def two_hour_wav() -> bytes:
    """A real 2-hour WAV, as small as one is: 4 kHz (MIN_RATE), 8-bit, mono: 28.8 MB of
    silence (a header claiming 2 hours over less data is a truncated file, not a long one)."""
    rate, seconds = 4000, 2 * 3600
    n = rate * seconds
    header = (b"RIFF" + struct.pack("<I", 36 + n) + b"WAVE" + b"fmt "
              + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate, 1, 8) + b"data"
              + struct.pack("<I", n))
    return header + bytes([128]) * n


def post(url, name: str, data: bytes):
    return httpx.post(f"{url}/predict", files=[("files", (name, data))], timeout=60)


@pytest.mark.parametrize("which", ["audio", "speech"])
def test_a_sound_model_answers_bad_files_in_its_own_words(which, request, tmp_path):
    """A PNG, a truncated WAV, a 2-hour WAV and random bytes posted to a served audio or
    speech model: each gets its kind's status (errors.KINDS) and a message of sound, seconds
    or frames; the API's title and docs name the project and the task, never images."""
    model = request.getfixturevalue(f"{which}_model")
    good = wav_bytes(tone(16000))
    with serving(model, tmp_path, "--max-bytes", str(40 * 2**20)) as url:
        ok = post(url, "ok.wav", good)
        assert ok.status_code == 200 and ok.json()["predictions"][0]["error"] == "", ok.text
        cases = {"photo.png": (png(), "unsupported", "not a sound file"),
                 "noise.bin": (np.random.default_rng(0).bytes(4096), "unsupported",
                               "not a sound file"),
                 "cut.wav": (good[:len(good) // 2], "corrupt",
                             "cannot decode the sound file: ValueError: truncated"),
                 "long.wav": (two_hour_wav(), "too_long", "clip of 7200.0 s is over the limit "
                                                          "of 30 s of audio per file")}
        for name, (data, kind, words) in cases.items():
            answer = post(url, name, data)
            assert answer.status_code == STATUS[kind], (name, answer.text)
            detail = answer.json()["detail"]
            assert detail.startswith(f"{name}: ") and words in detail, (name, detail)
            assert "image" not in detail and "pixel" not in detail, (name, detail)
            # beside a usable file: 200 partial, the file's error named by its kind
            mixed = httpx.post(f"{url}/predict", files=[("files", ("ok.wav", good)),
                                                        ("files", (name, data))], timeout=60)
            assert mixed.status_code == 200 and mixed.json()["status"] == "partial"
            assert mixed.json()["predictions"][1]["error"].startswith(f"{kind}: {words}")
        both = httpx.post(f"{url}/predict", files=[("files", ("a.png", png())),
                                                   ("files", ("cut.wav", good[:100]))])
        assert both.status_code == MIXED_STATUS, both.text
        api = httpx.get(f"{url}/openapi.json").json()
        docs = httpx.get(f"{url}/docs").text
    assert api["info"]["title"] == f"{tmp_path.name}: {which} model API"
    assert f"<title>{tmp_path.name}: {which} model API" in docs
    assert "Upload sound files to /predict" in api["info"]["description"]
    described = json.dumps(api["paths"]["/predict"])
    assert "image" not in described.lower() and "pixel" not in described.lower()
    responses = api["paths"]["/predict"]["post"]["responses"]
    assert "unsupported: not a sound file" in responses[str(STATUS["unsupported"])][
        "description"]
    assert "too_long" in responses[str(STATUS["too_long"])]["description"]


def test_an_image_model_answers_as_before(tmp_path):
    """The image model's answers keep their statuses and words (the kind is `unsupported`
    where it was `not_image`); its API speaks of images."""
    from tests.conftest import write_image
    from tests.fake_registry import write_onnx

    write_onnx(tmp_path / "image.onnx", "b")
    broken = write_image(tmp_path / "noise.png", size=(30, 30)).read_bytes()[:80]
    with serving(tmp_path / "image.onnx", tmp_path, "--max-pixels", "1000") as url:
        ok = post(url, "a.png", png())
        assert ok.status_code == 200 and ok.json()["predictions"][0]["label"] == "b", ok.text
        text = post(url, "notes.txt", b"text")
        assert text.status_code == 415 == STATUS["unsupported"], text.text
        assert text.json()["detail"] == "notes.txt: not an image Pillow can read"
        cut = post(url, "cut.png", broken)
        assert cut.status_code == 422 and cut.json()["detail"].startswith(
            "cut.png: cannot decode: "), cut.text
        mixed = httpx.post(f"{url}/predict", files=[("files", ("a.png", png())),
                                                    ("files", ("notes.txt", b"text"))])
        assert mixed.json()["predictions"][1]["error"] == (
            "unsupported: not an image Pillow can read")
        big = post(url, "big.png", write_image(tmp_path / "big.png", size=(64, 64)).read_bytes())
        assert big.status_code == 422 and big.json()["detail"] == (
            "big.png: image has 64x64 = 4096 pixels, over --max-pixels 1000 (default: "
            "validate.max_pixels)"), big.text
        api = httpx.get(f"{url}/openapi.json").json()
    assert api["info"]["title"] == f"{tmp_path.name}: classification model API"
    assert "unsupported: not an image" in api["paths"]["/predict"]["post"]["responses"]["415"][
        "description"]


# ---- the kinds and their statuses: written once

def bad_input_kinds(root: Path) -> dict:
    """{kind: [file:line]} of every BadInput(kind, ...) written under root."""
    found = {}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "BadInput"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                found.setdefault(node.args[0].value, []).append(
                    f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_bad_input_kind_raised_is_a_documented_one():
    kinds = {}
    for folder in ("stages", "tools"):
        for kind, where in bad_input_kinds(ROOT / folder).items():
            kinds.setdefault(kind, []).extend(where)
    assert set(kinds) <= set(KINDS), {k: w for k, w in kinds.items() if k not in KINDS}
    assert {"unsupported", "corrupt", "too_large", "too_long"} <= set(kinds)
    with pytest.raises(ValueError, match="unknown kind of bad input 'not_image'"):
        BadInput("not_image", "a kind that is not in KINDS")


def statuses_written(path: Path) -> list[str]:
    """Where path writes a bad-input status: as a number in its code, or in its text (a
    docstring, a comment, a help string)."""
    text = path.read_text()
    found = [f"{path.name}:{node.lineno}: {node.value}" for node in ast.walk(ast.parse(text))
             if isinstance(node, ast.Constant) and type(node.value) is int
             and node.value in BAD_INPUT_STATUSES]
    pattern = re.compile(r"\b(%s)\b" % "|".join(map(str, sorted(BAD_INPUT_STATUSES))))
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.search(line):
            found.append(f"{path.name}:{number}: {line.strip()}")
    return found


def test_the_kinds_table_is_the_only_place_a_bad_input_status_is_written(tmp_path):
    """tools/serve and the modalities' guarded decodes name kinds, never statuses: the
    statuses live in errors.KINDS alone (its --help and /openapi.json are made from it)."""
    modality = ROOT / "stages/lib/modality"
    paths = [*sorted(SERVE.glob("*.py")),
             *[p for p in sorted(modality.glob("*.py")) if p.name != "errors.py"]]
    assert [w for p in paths for w in statuses_written(p)] == []
    # the check sees both ways of writing one
    probe = tmp_path / "probe.py"
    probe.write_text((SERVE / "app.py").read_text() + "\nX = 415  # or 422 when mixed\n")
    assert len(statuses_written(probe)) == 2


def test_the_docs_list_each_kind_with_its_status_once():
    """docs/predict-serve.md's table of kinds is errors.KINDS."""
    text = (ROOT / "docs/predict-serve.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| (\d{3}) \|", text, re.M)
    assert dict((k, int(s)) for k, s in rows) == STATUS and len(rows) == len(STATUS)


def test_help_names_the_statuses_from_the_table():
    from click.testing import CliRunner

    from tools.serve.__main__ import main

    text = " ".join(CliRunner().invoke(main, ["--help"], terminal_width=200).output.split())
    assert "415 unsupported; 413 too_long, body_too_large; 422 too_large, corrupt, " \
           "unreadable, not_regular; 422 for kinds of different statuses" in text, text


# ---- one config, one handler, short functions

def test_no_function_in_tools_serve_is_over_60_lines():
    long = []
    for path in sorted(SERVE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.name}: {node.name} spans {lines} lines")
    assert long == []


def test_create_app_takes_the_models_a_config_and_the_loaders():
    import inspect

    from tools.serve.app import create_app
    from tools.serve.config import QUEUED_DECODES, ServeConfig

    assert list(inspect.signature(create_app).parameters) == ["models", "config", "loaders"]
    config = ServeConfig.from_options({"max_decode_mb": 10, "model_path": ("x",),
                                       "metrics_path": "m.json"})
    assert config.max_queued_decode_mb == QUEUED_DECODES * 10
    assert config.budget_bytes == 10 * 2**20 and config.metrics_path == Path("m.json")
    assert set(config.shown()) >= {"max_bytes", "max_pixels", "predict_timeout"}
