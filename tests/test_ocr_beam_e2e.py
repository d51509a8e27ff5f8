"""predict and serve --beam K (issue 20) on the session's tiny OCR run (ocr_project): through
the real CLI and a real HTTP server, the rows are the prefix beam search of the model's own
outputs, --beam 1 is the default greedy decoding byte for byte, and a model whose task has no
beam search refuses the option."""
import json
import types

import click
import httpx
import numpy as np
import pytest

from stages.lib.io import read_csv
from tests.conftest import run_tool, serving

WIDTH = 4


def predict(cwd, *args):
    return run_tool("predict", *args, cwd=cwd)


@pytest.fixture(scope="module")
def lines(ocr_project, tmp_path_factory):
    """24 test lines copied to a folder, and what a width-4 beam makes of the ONNX model's
    logits for each, computed here in-process (tools.inference + stages.tasks.common.ctc)."""
    from stages.tasks.common.ctc import beam, greedy
    from stages.lib.modality.imageserve import read as read_image
    from tools.inference import load

    folder = tmp_path_factory.mktemp("beam_lines")
    rows = read_csv(ocr_project / "plots/eval/predictions.csv")[:24]
    model = load("onnxruntime", ocr_project / "models/model.onnx")
    names = []
    for r in rows:
        name = r["path"].split("/")[-1]
        (folder / name).write_bytes((ocr_project / "data/sample" / r["path"]).read_bytes())
        names.append(name)
    names.sort()
    logits = model.logits(np.stack([read_image(folder / n, model.image_size, model.channels)
                                    for n in names]))
    charset = model.meta["charset"]
    return folder, names, dict(zip(names, beam(logits, charset, WIDTH), strict=True)), \
        dict(zip(names, greedy(logits, charset), strict=True))


def rows_of(path):
    return {json.loads(line)["path"].split("/")[-1]: json.loads(line)
            for line in path.read_text().splitlines()}


def test_predict_beam_through_the_cli(ocr_project, lines, tmp_path):
    folder, names, want_beam, want_greedy = lines
    model = str(ocr_project / "models/model.onnx")
    outs = {}
    for name, extra in (("default", []), ("beam1", ["--beam", "1"]),
                        ("beam", ["--beam", str(WIDTH)])):
        outs[name] = tmp_path / f"{name}.jsonl"
        proc = predict(folder, ".", "--model", model, "--out", str(outs[name]), *extra)
        assert proc.returncode == 0, proc.stderr
    assert outs["beam1"].read_bytes() == outs["default"].read_bytes()
    default, got = rows_of(outs["default"]), rows_of(outs["beam"])
    assert sorted(got) == names
    for name in names:
        assert (default[name]["text"], default[name]["confidence"]) == want_greedy[name]
        assert (got[name]["text"], got[name]["confidence"]) == want_beam[name], name
        assert 0 <= got[name]["confidence"] <= 1 and not got[name]["error"]
    proc = predict(folder, ".", "--model", model, "--out", "-", "--beam", "0")
    assert proc.returncode == 2 and "--beam" in proc.stderr


def test_serve_beam_answers_over_http(ocr_project, lines, tmp_path):
    folder, names, want_beam, _ = lines
    with serving(ocr_project / "models/model.onnx", tmp_path, "--beam", str(WIDTH)) as url:
        chosen = names[:6]
        files = [("files", (n, (folder / n).read_bytes(), "application/octet-stream"))
                 for n in chosen]
        answer = httpx.post(f"{url}/predict", files=files, timeout=60)
        assert answer.status_code == 200, answer.text
        got = [(p["text"], p["confidence"]) for p in answer.json()["predictions"]]
        assert got == [want_beam[n] for n in chosen]


def test_beam_is_refused_for_a_task_without_beam_search():
    from stages.tasks.classification import TASK
    from tools.options import apply_decode_options

    model = types.SimpleNamespace(task=TASK, meta={})
    with pytest.raises(click.UsageError, match=r"--beam: the model's task \(classification\)"):
        apply_decode_options(model, beam=3)
    apply_decode_options(model, score_threshold=0.5)
    assert model.meta == {"score_threshold": 0.5}
