"""The run report: every section with the run's real numbers, offline, deterministic, and a
real browser that renders it without errors.

One tiny pipeline run (20 images per class, 1 epoch) is shared by the tests marked e2e; the
others need no pipeline."""
import csv
import io
import json
import os
import re
import socket
from html.parser import HTMLParser
from pathlib import Path

import pytest

from stages.lib.io import StageError
from stages.report import charts, facts, sections
from stages.report.html import flatten, stylesheet
from stages.tasks import get
from tests.chromium import find_chromium, load_page
from tests.conftest import ROOT, TINY_RUN, copy_run, missing_tool, run_stage
from tools.project import dvc, git

SECTIONS = ["provenance", "data", "training", "evaluation", "export", "experiments"]
OVERRIDES = TINY_RUN


class Page(HTMLParser):
    """Sections, data-key/data-value pairs, every URL-bearing attribute and the tag classes."""

    def __init__(self, text: str):
        super().__init__()
        self.sections, self.values, self.urls, self.tags = [], {}, [], []
        self.classes_of = {}
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if tag == "section" and "id" in attrs:
            self.sections.append(attrs["id"])
        if "data-key" in attrs:
            key = attrs["data-key"]
            if "data-value" in attrs:
                self.values[key] = json.loads(attrs["data-value"])
            self.classes_of[key] = attrs.get("class", "")
        for name in ("src", "href", "action", "poster", "srcset", "data"):
            if name in attrs:
                self.urls.append(attrs[name])
        for url in re.findall(r"url\(([^)]*)\)", attrs.get("style", "")):
            self.urls.append(url)


@pytest.fixture(scope="module")
def run(trained_project, tmp_path_factory):
    """A project copy on which `dvc repro` ran once with the report as its last stage."""
    return copy_run(trained_project, tmp_path_factory.mktemp("report") / "project")


def page_of(run, name="reports/run.html"):
    return Page((run / name).read_text(encoding="utf-8"))


def load(run, rel):
    return json.loads((run / rel).read_text())


@pytest.mark.e2e
def test_every_section_is_there_in_order(run):
    assert page_of(run).sections == SECTIONS


@pytest.mark.e2e
def test_evaluation_numbers_are_the_runs(run):
    values = page_of(run).values
    headline = load(run, "metrics/eval.json")
    assert headline  # the metrics exist, so the loop below checks something
    for key, value in headline.items():
        assert values[f"eval.{key}"] == value, key
    for cls, metrics in load(run, "plots/eval/per_class.json").items():
        for key, value in metrics.items():
            assert values[f"per_class.{cls}.{key}"] == value, (cls, key)
    with open(run / "plots/eval/confusion.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    cells = {k: v for k, v in values.items() if k.startswith("confusion.")}
    assert sum(cells.values()) == len(rows) == headline["samples"]
    for r in rows[:: max(1, len(rows) // 20)]:
        count = sum(1 for x in rows if (x["actual"], x["predicted"]) == (r["actual"],
                                                                          r["predicted"]))
        assert cells[f"confusion.{r['actual']}.{r['predicted']}"] == count
    text = (run / "reports/run.html").read_text()
    assert f"{headline['accuracy']:.4f}" in text
    with open(run / "plots/eval/bad_cases.csv", newline="") as f:
        for r in list(csv.DictReader(f))[:5]:
            assert r["path"] in text and r["confidence"] in text


@pytest.mark.e2e
def test_data_and_training_numbers_are_the_runs(run):
    values = page_of(run).values
    split = load(run, "metrics/split.json")
    for name, counts in ((s, split[s]) for s in ("train", "val", "test")):
        for cls, n in counts.items():
            assert values[f"split.{name}.{cls}"] == n
        assert values[f"split.{name}.total"] == sum(counts.values())
    validation = load(run, "metrics/validation.json")
    for key in ("files", "valid", "invalid", "warned", "near_duplicate_pairs"):
        assert values[f"validation.{key}"] == validation[key]
    for check, n in load(run, "metrics/validation_checks.json").items():
        assert values[f"validation.{check}"] == n
    assert values["split.total"] == validation["valid"]
    for pair, found in split["leakage"].items():  # the split's checks are shown too
        assert values[f"leakage.{pair}.exact"] == found["exact"]
        assert values[f"leakage.{pair}.near"] == found["near"]
    for key, value in load(run, "metrics/train.json").items():
        assert values[f"train.{key}"] == value
    # every dvclive tsv is a curve; its last value is shown
    tsvs = sorted((run / "plots/train/plots/metrics").rglob("*.tsv"))
    assert len(tsvs) >= 4
    for path in tsvs:
        rel = path.relative_to(run / "plots/train/plots/metrics").with_suffix("").as_posix()
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        assert values[f"curve.{rel}"] == float(rows[-1][path.stem]), rel
        assert values[f"curve_steps.{rel}"] == len(rows)
    assert values["curve.val/loss"] == load(run, "metrics/train.json")["val_loss"]
    assert 'href="validation.html"' in (run / "reports/run.html").read_text()


@pytest.mark.e2e
def test_export_and_provenance_are_the_runs(run):
    import onnx

    from stages.lib.io import sha256_file

    page = page_of(run)
    values = page.values
    for key, value in flatten(load(run, "metrics/export.json")).items():
        assert values[f"export.{key}"] == value, key
    model = run / "models/model.onnx"
    assert values["onnx.bytes"] == model.stat().st_size
    assert values["onnx.parameters"] > 1000 and values["onnx.macs"] > values["onnx.parameters"]
    meta = {p.key: json.loads(p.value) for p in onnx.load(str(model)).metadata_props}
    assert {"classes", "image_size", "mean", "std", "manifest_sha256"} <= set(meta)
    for key, value in meta.items():
        assert values[f"onnx.{key}"] == value, key
    text = (run / "reports/run.html").read_text()
    assert sha256_file(run / "data/manifest.csv", missing="") == meta["manifest_sha256"]
    assert meta["manifest_sha256"] in text
    assert sha256_file(run / "requirements.lock", missing="") in text
    assert sha256_file(model, missing="") in text
    # params: the two overridden values are highlighted with their defaults, the rest are not
    for dotted, value in OVERRIDES.items():
        assert values[f"param.{dotted}"] == value
        assert "changed" in page.classes_of[f"param.{dotted}"]
    assert "changed" not in page.classes_of["param.train.lr"]
    assert "2 of" in text and "values differ from the defaults" in text


@pytest.mark.e2e
def test_page_is_self_contained_and_names_no_machine_or_commit(run):
    text = (run / "reports/run.html").read_text()
    page = Page(text)
    assert page.urls, "the page has images and links; the parser must see them"
    for url in page.urls:
        url = url.strip("'\" ")
        assert not re.match(r"^[a-z][a-z0-9+.-]*:", url) or url.startswith("data:"), url
        assert not url.startswith("//"), url
    assert "http://" not in text and "https://" not in text
    assert "script" not in page.tags and "link" not in page.tags and "iframe" not in page.tags
    assert "@import" not in text and "@font-face" not in text
    # no absolute path, hostname or commit: the out must be reproducible anywhere
    assert str(run) not in text and str(ROOT) not in text
    host = socket.gethostname()
    if len(host) >= 6:
        assert host not in text
    assert git(run, "rev-parse", "HEAD").strip() not in text


@pytest.mark.e2e
def test_stage_is_deterministic_and_dvc_agrees(run):
    first = (run / "reports/run.html").read_bytes()
    proc = run_stage("report", cwd=run)
    assert proc.returncode == 0, proc.stderr
    assert (run / "reports/run.html").read_bytes() == first
    assert "report" not in dvc(run, "status").stdout  # the out still matches dvc.lock


@pytest.mark.e2e
def test_training_section_says_which_epoch_is_the_model(run, tmp_path, monkeypatch):
    """train.keep: the page names the epoch models/model.pt holds (issue 17, item 9)."""
    from stages.report.page import render

    assert "kept" not in load(run, "metrics/train.json")  # the default, train.keep: last
    assert page_of(run).values["train.keep"] == "last"
    copy = copy_run(run, tmp_path / "best")
    train = {**load(copy, "metrics/train.json"), "kept": "best", "best_epoch": 1}
    (copy / "metrics/train.json").write_text(json.dumps(train))
    monkeypatch.chdir(copy)
    task = get("classification")
    page = render(facts.gather("params.yaml", facts.OUT, task), task)
    assert Page(page).values["train.keep"] == "best"
    assert "the best epoch (1)" in page and "(train.keep: best)" in page


@pytest.mark.e2e
def test_every_input_is_read_once_per_render(run, monkeypatch):
    """A real render, in this process, over the run: every file under the project is opened
    at most once (the manifest is hashed and counted in one pass, the code hashed once, the
    params file read once for every section), and the page is the one the stage wrote."""
    import builtins
    from collections import Counter

    from stages.report.__main__ import others_keys
    from stages.report.page import render

    from stages.lib.model.provenance import ROOT

    root, opened, real_open = Path(os.path.abspath(run)), Counter(), builtins.open

    real_os_open = os.open

    def count(file):  # the code and requirements.lock are read where the package lives (the
        # root of a pipeline under pipelines/NAME/): here the checkout the tests run from
        if isinstance(file, (str, os.PathLike)):
            path = Path(os.path.abspath(file))
            if path.is_relative_to(root):
                opened[path.relative_to(root).as_posix()] += 1
            elif path.is_relative_to(ROOT):
                name = path.relative_to(ROOT).as_posix()
                code = name.startswith("stages/") and name.endswith(".py")
                if code or name == "requirements.lock":
                    opened[name] += 1

    def counting_open(file, *args, **kwargs):
        count(file)
        return real_open(file, *args, **kwargs)

    def counting_os_open(file, *args, **kwargs):  # user YAML: read_yaml opens with os.open
        count(file)
        return real_os_open(file, *args, **kwargs)

    monkeypatch.chdir(run)
    task = get("classification")
    with monkeypatch.context() as patch:
        patch.setattr(builtins, "open", counting_open)  # open(...)
        patch.setattr(io, "open", counting_open)  # Path.read_text, Path.read_bytes
        patch.setattr(os, "open", counting_os_open)
        page = render(facts.gather("params.yaml", facts.OUT, task,
                                   hidden=others_keys(task)), task)  # as the stage renders
    assert {name: n for name, n in opened.items() if n > 1} == {}
    curves = {p.relative_to(run).as_posix() for p in (run / facts.CURVES).rglob("*.tsv")}
    code = {p.relative_to(run).as_posix() for p in (run / "stages").rglob("*.py")}
    details = {p.relative_to(run).as_posix() for p in (run / facts.EVAL_DIR).iterdir()}
    inputs = {facts.MANIFEST, facts.QUARANTINE, facts.VALIDATION, facts.VALIDATION_CHECKS,
              facts.SPLIT, facts.TRAIN,
              facts.EVAL, facts.EXPORT, facts.ONNX, facts.LOCK, Path("params.yaml")}
    assert curves and code and "plots/eval/bad_cases.png" in details
    assert set(opened) == {p.as_posix() for p in inputs} | curves | code | details  # once each
    assert page.encode() == (run / "reports/run.html").read_bytes()


@pytest.mark.e2e
def test_run_and_validation_pages_inline_the_same_stylesheet(run):
    """One stylesheet (stages/report/style.css) for both pages, inline, and every class the
    validation page uses is styled by it."""
    css = stylesheet()
    assert ".badge" in css and len(css) > 1000
    for name in ("run.html", "validation.html"):
        text = (run / "reports" / name).read_text()
        assert re.findall(r"<style>(.*?)</style>", text, re.S) == ["\n" + css], name
    validation = (run / "reports/validation.html").read_text()
    used = {c for attr in re.findall(r'class="([^"]*)"', validation) for c in attr.split()}
    assert {"badge", "lead", "muted"} <= used
    styled = set(re.findall(r"\.([a-zA-Z][\w-]*)", css))
    assert used <= styled, used - styled


@pytest.mark.e2e
def test_report_reruns_when_only_code_changes(run):
    """The code hash shown must never be stale: any change under stages/ re-runs the report."""
    helper = run / "stages/lib/io.py"
    original = helper.read_text()
    try:
        helper.write_text(original + "\n# a comment\n")
        assert "report" in dvc(run, "status").stdout
    finally:
        helper.write_text(original)
    assert "report" not in dvc(run, "status").stdout


@pytest.mark.e2e
def test_chromium_renders_it_without_errors(run):
    """Headless Chromium loads the page from disk (file://), offline. Checked: the screenshot
    is not blank, no console error or warning, no uncaught exception, no failed load, every
    <img> decoded, every section present, and no request other than the file itself and its
    data: images."""
    executable = chromium_or_skip()
    result = load_page(run / "reports/run.html", executable)
    assert_renders_cleanly(result)
    assert result["sections"] == SECTIONS
    assert len(result["images"]) >= 4  # >= 3 curves and the bad-case sheet
    assert result["height"] > 2000


def test_the_browser_check_catches_a_broken_page(tmp_path):
    """The same checks fail on a page with a script error, a console error and a broken image:
    the browser test above is not vacuous."""
    executable = chromium_or_skip()
    page = tmp_path / "broken.html"
    page.write_text('<html><body><h1>broken</h1><img src="data:image/png;base64,AAAA">'
                    '<img src="missing.png"><script>console.error("bad");'
                    'throw new Error("boom")</script></body></html>')
    result = load_page(page, executable)
    assert any("boom" in e for e in result["exceptions"])
    assert ("error", "bad") in result["console"]
    assert any(level == "error" for level, _ in result["log"])
    assert 0 in result["images"]
    with pytest.raises(AssertionError):
        assert_renders_cleanly(result)


@pytest.mark.e2e
def test_experiments_page_marks_the_best_and_leaves_the_dvc_out_alone(run):
    """`--experiments` adds the commit and `dvc exp show`; reports/run.html is untouched."""
    tracked = (run / "reports/run.html").read_bytes()
    dvc(run, "exp", "run", "-n", "higher-lr", "-S", "train.lr=0.02")
    proc = run_stage("report", "--experiments", cwd=run)
    assert proc.returncode == 0, proc.stderr
    text = (run / "reports/experiments.html").read_text()
    page = Page(text)
    assert page.sections == SECTIONS
    assert git(run, "rev-parse", "HEAD").strip() in text
    assert 'data-experiment="higher-lr"' in text and 'data-experiment="workspace"' in text
    shown = json.loads(dvc(run, "exp", "show", "--json").stdout)
    rows = sections.experiment_rows(shown)
    exp = next(r for r in rows if r["name"] == "higher-lr")
    assert exp["params"]["train.lr"] == 0.02
    accuracies = {r["name"]: r["metrics"]["metrics/summary.json:accuracy"] for r in rows
                  if "metrics/summary.json:accuracy" in r["metrics"]}
    assert len(accuracies) >= 3  # workspace, the commit and the experiment
    best = max(accuracies.values())
    for name, acc in accuracies.items():
        key = f"exp.{name}.accuracy"
        assert page.values[key] == acc
        assert ("best" in page.classes_of[key]) == (acc == best), name
    ece = {n: r["metrics"]["metrics/summary.json:val_loss"] for n, r in
           ((r["name"], r) for r in rows) if "metrics/summary.json:val_loss" in r["metrics"]}
    lowest = min(ece.values())  # val_loss: lower is better
    for name, value in ece.items():
        assert ("best" in page.classes_of[f"exp.{name}.val_loss"]) == (value == lowest), name
    # the experiments page never overwrites the DVC out
    refused = run_stage("report", "--experiments", "--out", "reports/run.html", cwd=run)
    assert refused.returncode == 1 and "DVC out" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert (run / "reports/run.html").read_bytes() != b""
    assert "report" not in dvc(run, "status").stdout
    assert tracked != (run / "reports/run.html").read_bytes()  # exp run re-made it for the exp


def test_missing_input_is_named(tmp_path):
    proc = run_stage("report", cwd=tmp_path)
    assert proc.returncode == 1
    assert "not found" in proc.stderr and "dvc repro" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_curves_are_read_generically(tmp_path):
    """A new dvclive metric becomes a curve without code changes; train and val share a chart."""
    root = tmp_path / "metrics"
    for rel, rows in {"train/acc": [(0, 0.5), (1, 0.7)], "val/acc": [(0, 0.4), (1, 0.6)],
                      "epoch_seconds": [(0, 3.0), (1, 2.5)]}.items():
        path = root / f"{rel}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        name = Path(rel).name
        path.write_text(f"step\t{name}\n" + "".join(f"{s}\t{v}\n" for s, v in rows))
    curves = facts.read_curves(root)
    assert curves == {"acc": {"train": [(0.0, 0.5), (1.0, 0.7)], "val": [(0.0, 0.4), (1.0, 0.6)]},
                      "epoch_seconds": {"epoch_seconds": [(0.0, 3.0), (1.0, 2.5)]}}
    png = charts.curve_png("acc", curves["acc"])
    assert png.startswith(b"\x89PNG") and png == charts.curve_png("acc", curves["acc"])
    assert b"matplotlib" not in png and b"tIME" not in png  # no version, no date
    (root / "bad.tsv").write_text("epoch\tx\n1\t2\n")
    with pytest.raises(StageError, match="bad.tsv"):
        facts.read_curves(root)


def chromium_or_skip() -> str:
    executable = find_chromium()
    if executable:
        return executable
    missing_tool("chromium", "apt-get install chromium")


def assert_renders_cleanly(result):
    from PIL import Image, ImageStat

    image = Image.open(io.BytesIO(result["screenshot"])).convert("L")
    assert image.size[0] >= 1000
    assert ImageStat.Stat(image).stddev[0] > 10, "the screenshot is blank"
    assert len(image.getcolors(1 << 16) or []) > 50, "the screenshot is nearly uniform"
    assert result["exceptions"] == []
    assert [m for m in result["console"] if m[0] in ("error", "warning", "assert")] == []
    assert [e for e in result["log"] if e[0] in ("error", "warning")] == []
    assert result["failed"] == []
    assert result["images"] and 0 not in result["images"], result["images"]
    own = [u for u in result["requests"] if not u.startswith("data:")]
    assert len(own) == 1 and own[0].startswith("file://"), own


def test_split_balance_and_leakage_findings_are_shown():
    """metrics/split.json's balance findings and leakage counts reach the page, each number
    with its exact value; a clean split says so."""
    found = {
        "balance": {"checked": True, "z": 4.0, "slack": 0.01, "off_target": 1, "findings": [
            {"class": "sneaker", "split": "test", "share": 0.039, "target": 0.15,
             "tolerance": 0.03, "files": 7000,
             "groups": [{"size": 4984, "files": 11075, "split": "train",
                         "example": "sneaker/1.png", "key": "ab"}]}]},
        "leakage": {"train-test": {"exact": 2, "near": 3,
                                   "examples": ["a/1.png = b/9.png"]},
                    "train-val": {"exact": 0, "near": 0, "examples": []}}}
    page = Page(sections.split_checks(found))
    assert page.values["balance.sneaker.test"] == 0.039
    assert page.values["leakage.train-test.exact"] == 2
    assert page.values["leakage.train-test.near"] == 3
    assert page.values["leakage.train-val.near"] == 0
    text = sections.split_checks(found)
    assert "4984 in a group of 11075 in train (e.g. sneaker/1.png)" in text
    assert "a/1.png = b/9.png" in text and "5 duplicates across splits" in text
    clean = {"balance": {**found["balance"], "findings": [], "off_target": 0},
             "leakage": {"train-test": {"exact": 0, "near": 0, "examples": []}}}
    assert "every class share within tolerance" in sections.split_checks(clean)
    assert "no duplicates across splits" in sections.split_checks(clean)


def test_the_model_cost_counts_parameters_and_multiply_adds_per_input(tmp_path):
    """A conv (1 -> 4 channels, 3x3, 8x8 output) then a linear layer (256 -> 10): 2,304 + 2,560
    multiply-adds per image and 40 + 2,570 parameters, whatever the batch. A conv alone over
    lines of any width (the width dynamic too): its multiply-adds depend on the width and are
    not given."""
    import warnings

    import onnx
    import torch

    conv = torch.nn.Conv2d(1, 4, 3, padding=1)
    fixed = torch.nn.Sequential(conv, torch.nn.Flatten(), torch.nn.Linear(256, 10)).eval()
    batch, width = torch.export.Dim("batch"), torch.export.Dim("width")
    for name, model, dims, cost in (("fixed", fixed, {0: batch}, (40 + 2570, 2304 + 2560)),
                                    ("lines", conv, {0: batch, 3: width}, (40, None))):
        path = tmp_path / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (torch.zeros(2, 1, 8, 8),), str(path), verbose=False,
                              input_names=["input"], external_data=False,
                              dynamic_shapes=(dims,))
        assert facts.onnx_cost(onnx.load(str(path))) == cost, name


def test_each_task_finds_its_report_module_and_a_task_without_one_gets_none():
    """stages/report/page.py finds a task's headline and sections in stages/report/tasks/
    <task>.py (out of the task's, and so train's, code); a task without such a module (a user's
    own package) gets the generic page only."""
    from types import SimpleNamespace

    from stages.report.page import task_report
    from stages.tasks import available

    for name in available():
        module = task_report(get(name))
        assert module.__name__ == f"stages.report.tasks.{name}"
        assert callable(module.headline) and callable(module.sections)
    assert task_report(SimpleNamespace(name="brightness")) is None
