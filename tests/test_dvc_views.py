"""What a DVC user sees first (issue 41, items 13 and 14): `dvc exp show` has a column per
figure people compare runs by and fits 120 columns; `dvc plots show` / `dvc plots diff` draw
every task's curves from the project's own page template, with no network."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, copy_run, missing_tool
from tools.project import copy_project, dvc

# the command docs/experiments.md gives: the metrics, without the params and dependency hashes
EXP_SHOW = ["exp", "show", "--no-pager", "--drop", ".*[./]|task|stages"]
COMPARED = ["best_epoch", "val_loss", "parity"]
SUMMARY = {"classification": ["accuracy", "balanced_accuracy", "f1_macro", "val_acc"],
           "detection": ["map50", "map", "precision", "recall", "val_map50"],
           "segmentation": ["miou_foreground", "miou", "val_miou"],
           "ocr": ["cer", "wer", "line_accuracy", "val_cer"]}
# the plots each task declares in dvc.yaml and writes (besides the training curves)
TASK_PLOTS = {"classification": ["plots/eval/confusion.csv", "plots/eval/per_class_f1.csv"],
              "detection": ["plots/eval/pr_curve.csv"],
              "segmentation": ["plots/eval/per_class_iou.csv"],
              "ocr": ["plots/eval/cer_by_length.csv"]}
TRAIN_CURVES = "plots/train/plots/metrics/val/loss.tsv"


@pytest.fixture(params=["classification", "detection", "segmentation", "ocr"])
def task_project(request):
    name = {"classification": "trained_project"}.get(request.param,
                                                    f"{request.param}_project")
    return request.param, request.getfixturevalue(name)


def run_dvc(root, *args, env=None):
    proc = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, capture_output=True,
                          text=True, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.e2e
def test_exp_show_has_the_compared_figures_and_fits_120_columns(task_project, tmp_path):
    import pandas as pd

    task, project = task_project
    p = copy_run(project, tmp_path / "p")
    shown = json.loads(run_dvc(p, "metrics", "show", "--json"))
    declared = {f: d["data"] for rev in shown.values() for f, d in (rev.get("data") or {}).items()}
    assert list(declared) == ["metrics/summary.json"], sorted(declared)
    assert set(declared["metrics/summary.json"]) == {*SUMMARY[task], *COMPARED}
    assert declared["metrics/summary.json"]["parity"] == "passed"
    # the counts are still committed files, `dvc metrics show FILE` prints them
    for counts in ("metrics/validation.json", "metrics/split.json", "metrics/eval.json"):
        assert (p / counts).is_file() and counts in run_dvc(p, "metrics", "show", counts)

    # why the --drop (docs/experiments.md): a column per param leaf and per dependency
    full = json.loads(run_dvc(p, "exp", "show", "--json"))[0]["data"]
    leaves = sum(len(pd.json_normalize(v["data"]).columns) for v in full["params"].values())
    assert leaves + len(full["deps"]) > 100, (leaves, len(full["deps"]))
    assert "…" in run_dvc(p, "exp", "show", "--no-pager", env={"COLUMNS": "120"})
    table = run_dvc(p, *EXP_SHOW, env={"COLUMNS": "120"})
    lines = [line.rstrip() for line in table.splitlines() if line.strip()]
    assert max(map(len, lines)) <= 120, table
    assert "…" not in table, table
    header = next(line for line in lines if "Experiment" in line).split()
    assert header[:2] == ["Experiment", "Created"]
    assert sorted(header[2:]) == sorted(declared["metrics/summary.json"])


@pytest.mark.e2e
def test_every_task_declares_its_curves(task_project, tmp_path):
    task, project = task_project
    p = copy_run(project, tmp_path / "p")
    # the run itself wrote the page template (the report stage's out): no extra step
    run_dvc(p, "plots", "show", "-o", str(tmp_path / "html"))
    assert not re.search(r"<script[^>]+src=", (tmp_path / "html/index.html").read_text())
    data = json.loads(run_dvc(p, "plots", "show", "--json", "-o", str(tmp_path / "out")))["data"]
    drawn = {name for name, entries in data.items()
             if entries and entries[0]["type"] == "vega" and entries[0]["content"]["data"]
             ["values"]}
    for plot in [TRAIN_CURVES, *TASK_PLOTS[task]]:
        assert plot in drawn, (plot, sorted(data))


def test_a_fresh_clone_gets_the_offline_page_with_no_manual_step(tmp_path):
    """The template .dvc/config names is the report stage's out (so `dvc repro` and `dvc pull`
    bring it); before any run, doctor names it missing with the fix and init writes it, and
    `dvc plots show` then writes a page that loads no script from a URL."""
    import yaml

    from tools.plots_template import template_path

    repo = copy_project(ROOT, tmp_path / "p")
    target = template_path(repo)
    assert target == repo.resolve() / "reports/plots_page.html" and not target.exists()
    report = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]["report"]
    assert "reports/plots_page.html" in report["outs"]
    doctor = subprocess.run([sys.executable, "-m", "tools.doctor"], cwd=repo,
                            capture_output=True, text=True).stdout
    assert "reports/plots_page.html (.dvc/config's plots.html_template) is missing" in doctor
    assert "fix: python -m tools.plots_template" in doctor
    before = run_dvc_fails(repo)
    assert "HTML template has to contain" in before  # what a user met before
    proc = subprocess.run([sys.executable, "-m", "tools.init", "--task", "classification"],
                          cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "plots: reports/plots_page.html" in proc.stdout and target.is_file()
    run_dvc(repo, "plots", "show", "-o", str(tmp_path / "out"))
    html = (tmp_path / "out/index.html").read_text()
    assert not re.search(r"<script[^>]+src=", html) and "cdn.jsdelivr" not in html
    assert "window.vegaEmbed" in html


def run_dvc_fails(root) -> str:
    """`dvc plots show` in root when the template file is missing: its error output."""
    proc = subprocess.run([sys.executable, "-m", "dvc", "plots", "show", "-o",
                           str(Path(root) / ".." / "missing")], cwd=root, capture_output=True,
                          text=True)
    assert proc.returncode != 0
    return proc.stdout + proc.stderr


def test_template_tool_writes_the_configured_page_from_the_package(tmp_path):
    repo = copy_project(ROOT, tmp_path / "p")
    target = repo / "reports/plots_page.html"
    assert not target.exists()  # generated, never committed
    proc = subprocess.run([sys.executable, "-m", "tools.plots_template"], cwd=repo,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    page = target.read_text()
    for mark in ("{plot_divs}", "{refresh_tag}", "window.vegaEmbed", "window.vegaLite"):
        assert page.count(mark) == 1, mark
    assert "<script src" not in page and "{scripts}" not in page  # DVC's CDN tags go nowhere
    assert "</script" not in page.split("<script>", 1)[1].rsplit("</script>", 1)[0]
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True,
                          text=True).stdout == ""  # ignored: a clone writes its own
    again = subprocess.run([sys.executable, "-m", "tools.plots_template"], cwd=repo,
                           capture_output=True, text=True)
    assert "already up to date" in again.stdout and target.read_text() == page
    # no setting: one line naming the config key and the command that sets it
    dvc(repo, "config", "--unset", "plots.html_template")
    proc = subprocess.run([sys.executable, "-m", "tools.plots_template"], cwd=repo,
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "dvc config plots.html_template ../reports/plots_page.html" in proc.stderr


SETTLE = """new Promise(done => {
  const colours = COLOURS;
  const ids = Object.keys(colours);
  const t0 = Date.now();
  const drawing = id => document.querySelector(`[id="${id}"] svg, [id="${id}"] canvas`);
  (function poll() {
    if (!ids.every(drawing) && Date.now() - t0 < 30000) return setTimeout(poll, 100);
    setTimeout(() => {
      const out = {};
      for (const id of ids) {  // the line marks (svg paths) stroked in each expected colour
        if (!drawing(id)) { out[id] = null; continue; }
        const paths = Array.from(document.querySelectorAll(`[id="${id}"] svg path`));
        out[id] = colours[id].map(c => paths.filter(p =>
          (p.getAttribute("stroke") || "").toLowerCase() === c.toLowerCase()
          && (p.getAttribute("d") || "").length > 10).length);
      }
      done(JSON.stringify(out));
    }, 500);
  })();
})"""


@pytest.mark.e2e
def test_plots_diff_draws_both_runs_offline_in_chromium(detection_project, tmp_path):
    from tests.chromium import find_chromium, load_page

    executable = find_chromium()
    if not executable:
        missing_tool("chromium", "apt-get install chromium")
    p = copy_run(detection_project, tmp_path / "p")
    dvc(p, "exp", "run", "-S", "train.lr=0.005", "evaluate")  # the workspace: another run
    out = tmp_path / "diff"
    run_dvc(p, "plots", "diff", "HEAD", "workspace", "-o", str(out))
    html = (out / "index.html").read_text()
    assert not re.search(r"<script[^>]+src=", html) and "cdn.jsdelivr" not in html
    # each vega plot: its spec, the revisions in its data, and the colours its lines get
    specs = {m.group(2): json.loads(m.group(1)) for m in re.finditer(
        r"var spec = (.*);\s*vegaEmbed\('#([^']+)', spec\);", html)}
    specs = {i: s for i, s in specs.items() if s}  # another task's plot: no file, no spec
    colours = {}
    for id_, spec in specs.items():
        revs = {row["rev"] for row in spec["data"]["values"]}
        assert revs == {"HEAD", "workspace"}, (id_, revs)
        color = spec["encoding"].get("color", {})
        if color.get("field") == "rev":  # one colour per run: both must be drawn
            colours[id_] = color["scale"]["range"][:2]
        else:  # pr_curve: one colour per class, one dash per run
            assert color.get("field") == "class" and spec["encoding"]["strokeDash"]["field"] \
                == "rev"
    pr = [i for i, s in specs.items() if s["encoding"].get("color", {}).get("field") == "class"]
    assert len(pr) == 1 and len(colours) >= 3, sorted(specs)  # PR curves, the training curves
    result = load_page(out / "index.html", executable, height=4000, offline=True,
                       settle=SETTLE.replace("COLOURS", json.dumps(
                           {**colours, pr[0]: ["#4c78a8"]})))  # vega's first category colour
    assert result["exceptions"] == [], result["exceptions"]
    assert [m for m in result["console"] if m[0] == "error"] == []
    assert all(u.startswith(("file:", "data:", "about:")) for u in result["requests"]), \
        result["requests"]
    drawn = json.loads(result["settled"])
    for id_, counts in drawn.items():
        assert counts is not None, f"{id_}: no canvas (vega did not load)"
        assert all(n > 0 for n in counts), (id_, counts)
    shutil.rmtree(out)
