"""evaluate: metrics against hand-computed values, bad cases, plots, and the stage on real files."""
import json

import numpy as np
import pytest

from stages.tasks.common.singlelabel.metrics import (
    bad_case_rows, confusion_png, contact_sheet_png, expected_calibration_error, headline_metrics,
    per_class_metrics, probability_metrics)
from tests.conftest import run_stage
from tests.fake_model_project import CLASSES, make_fake_project, read_rows


def test_imbalanced_set_where_accuracy_and_balanced_accuracy_differ():
    # 8 of class 0, all right; 2 of class 1, one predicted as 0.
    y_true = [0] * 8 + [1, 1]
    y_pred = [0] * 8 + [0, 1]
    m = headline_metrics(y_true, y_pred, 2)
    assert m["accuracy"] == pytest.approx(9 / 10)
    assert m["balanced_accuracy"] == pytest.approx((1 + 1 / 2) / 2)  # mean per-class recall
    # class 0: P = 8/9, R = 1, F1 = 16/17; class 1: P = 1, R = 1/2, F1 = 2/3
    assert m["precision_macro"] == pytest.approx((8 / 9 + 1) / 2)
    assert m["recall_macro"] == pytest.approx(0.75)
    assert m["f1_macro"] == pytest.approx((16 / 17 + 2 / 3) / 2)
    # weighted by support 8 and 2
    assert m["precision_weighted"] == pytest.approx(0.8 * 8 / 9 + 0.2 * 1)
    assert m["recall_weighted"] == pytest.approx(0.9)
    assert m["f1_weighted"] == pytest.approx(0.8 * 16 / 17 + 0.2 * 2 / 3)
    assert m["samples"] == 10


def test_balanced_set_and_a_class_never_predicted():
    y_true = [0, 0, 0, 1]
    y_pred = [0, 0, 1, 1]
    m = headline_metrics(y_true, y_pred, 3)  # class 2 has no support and is never predicted
    assert m["accuracy"] == pytest.approx(0.75)
    # class 0: P=1, R=2/3, F1=0.8; class 1: P=1/2, R=1, F1=2/3; class 2: all 0
    assert m["precision_macro"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert m["recall_macro"] == pytest.approx((2 / 3 + 1 + 0) / 3)
    per = per_class_metrics(y_true, y_pred, ["a", "b", "c"])
    assert list(per) == ["a", "b", "c"]
    assert per["a"] == pytest.approx({"precision": 1.0, "recall": 2 / 3, "f1": 0.8, "support": 3})
    assert per["b"] == pytest.approx({"precision": 0.5, "recall": 1.0, "f1": 2 / 3, "support": 1})
    assert per["c"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}


def test_expected_calibration_error_by_hand():
    # bins (0, .5] and (.5, 1]: first holds {0.3 wrong}: |0 - 0.3| * 1/4 = 0.075;
    # second {0.9 right, 0.9 wrong, 0.6 right}: |2/3 - 0.8| * 3/4 = 0.1.
    ece = expected_calibration_error([0.9, 0.9, 0.6, 0.3], [1, 0, 1, 0], bins=2)
    assert ece == pytest.approx(0.175)
    # one bin: |accuracy - mean confidence| = |0.5 - 0.675|
    assert expected_calibration_error([0.9, 0.9, 0.6, 0.3], [1, 0, 1, 0], 1) == pytest.approx(0.175)
    # perfectly calibrated: confidence 1 and always right
    assert expected_calibration_error([1.0, 1.0], [1, 1], 15) == 0.0


def test_top5_accuracy_only_beyond_five_classes_and_ece_from_probabilities():
    ranks = np.array([[.5, .2, .1, .08, .07, .05],    # true 0: rank 1
                      [.5, .2, .1, .08, .07, .05],    # true 4: rank 5, in the top 5
                      [.5, .2, .1, .08, .07, .05]])   # true 5: rank 6, out
    m = probability_metrics(np.array([0, 4, 5]), ranks, bins=10)
    assert m["top5_accuracy"] == pytest.approx(2 / 3)
    # every confidence 0.5 in bin (0.4, 0.5]; accuracy 1/3
    assert m["ece"] == pytest.approx(abs(1 / 3 - 0.5))
    five = probability_metrics(np.array([0]), np.full((1, 5), 0.2), bins=10)
    assert "top5_accuracy" not in five


def test_bad_cases_most_confident_first_ties_by_path_and_top3():
    probs = np.array([[0.9, 0.05, 0.05],   # right: not a bad case
                      [0.2, 0.7, 0.1],     # wrong, 0.7
                      [0.1, 0.1, 0.8],     # wrong, 0.8
                      [0.2, 0.7, 0.1]])    # wrong, 0.7: ties with "d" broken by path
    rows = bad_case_rows(["a", "d", "b", "c"], [0, 0, 0, 0], probs, ["x", "y", "z"])
    assert [r["path"] for r in rows] == ["b", "c", "d"]
    assert rows[0] == {"path": "b", "true": "x", "predicted": "z", "confidence": "0.800000",
                       "top3": "z:0.8000 x:0.1000 y:0.1000"}
    assert rows[1]["top3"] == "y:0.7000 x:0.2000 z:0.1000"


def test_pngs_are_deterministic_and_carry_no_software_stamp():
    a = confusion_png([0, 1, 1], [0, 1, 0], ["a", "b"])
    assert a == confusion_png([0, 1, 1], [0, 1, 0], ["a", "b"])
    assert a.startswith(b"\x89PNG") and b"matplotlib" not in a
    img = np.zeros((8, 8, 1), dtype=np.uint8)
    row = {"path": "a/1.png", "true": "a", "predicted": "b", "confidence": "0.9"}
    sheet = contact_sheet_png([img], [row])
    assert sheet == contact_sheet_png([img], [row]) and sheet.startswith(b"\x89PNG")
    assert contact_sheet_png([], []).startswith(b"\x89PNG")  # nothing misclassified


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    root = make_fake_project(tmp_path_factory.mktemp("evaluate"))
    proc = run_stage("evaluate", cwd=root)
    assert proc.returncode == 0, proc.stderr
    return root


def test_stage_writes_every_output_consistently(evaluated):
    root = evaluated
    m = json.loads((root / "metrics/eval.json").read_text())
    assert m["samples"] == 12 and set(m) >= {"accuracy", "balanced_accuracy", "ece", "f1_macro",
                                              "f1_weighted", "precision_macro", "recall_macro"}
    assert "top5_accuracy" not in m  # 3 classes
    per = json.loads((root / "plots/eval/per_class.json").read_text())
    assert list(per) == CLASSES and sum(v["support"] for v in per.values()) == 12
    confusion = read_rows(root / "plots/eval/confusion.csv")
    assert list(confusion[0]) == ["path", "actual", "predicted"] and len(confusion) == 12
    wrong = [r for r in confusion if r["actual"] != r["predicted"]]
    assert m["accuracy"] == pytest.approx(1 - len(wrong) / 12)
    bad = read_rows(root / "plots/eval/bad_cases.csv")
    assert sorted(r["path"] for r in bad) == sorted(r["path"] for r in wrong)
    assert [(-float(r["confidence"]), r["path"]) for r in bad] == sorted(
        (-float(r["confidence"]), r["path"]) for r in bad)
    f1 = read_rows(root / "plots/eval/per_class_f1.csv")
    assert [r["class"] for r in f1] == CLASSES
    for name in ("confusion.png", "bad_cases.png"):
        assert (root / "plots/eval" / name).read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in (root / "plots/eval").iterdir()) == sorted(
        ["per_class.json", "confusion.csv", "per_class_f1.csv", "confusion.png", "bad_cases.csv",
         "bad_cases.png"])  # exactly the task's files: nothing stale, no temp file
    assert "git_commit" in json.loads((root / "logs/evaluate.json").read_text())


def test_stage_rerun_gives_identical_bytes(evaluated):
    outs = ["metrics/eval.json", "plots/eval/per_class.json", "plots/eval/confusion.csv",
            "plots/eval/confusion.png", "plots/eval/per_class_f1.csv", "plots/eval/bad_cases.csv",
            "plots/eval/bad_cases.png"]
    before = {o: (evaluated / o).read_bytes() for o in outs}
    proc = run_stage("evaluate", cwd=evaluated)
    assert proc.returncode == 0, proc.stderr
    assert {o: (evaluated / o).read_bytes() for o in outs} == before


def test_bad_param_is_named(tmp_path):
    (tmp_path / "params.yaml").write_text("evaluate:\n  calibration_bins: 0\n")
    proc = run_stage("evaluate", cwd=tmp_path)
    assert proc.returncode != 0 and "evaluate.calibration_bins" in proc.stderr
    assert "Traceback" not in proc.stderr
