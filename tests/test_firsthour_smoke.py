"""Issue 17, item 3: the smoke run uses a seeded subset of the configured data.source with the
user's params (validate.classes included), and shows each stage as it starts."""
import pytest

from tests.conftest import copy_run, run_tool, write_image
from tools.project import set_params


@pytest.mark.e2e
def test_smoke_runs_on_the_configured_data_with_the_users_classes(own_data_project, tmp_path):
    run = copy_run(own_data_project, tmp_path / "run")
    set_params(run, {"validate.classes": ["blue", "green", "red"]})
    proc = run_tool("smoke", "--per-class", "6", cwd=run)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == ("smoke: 18 files of data/mine (6 per class, seed 0), 1 epoch(s), "
                        "your params otherwise")
    stages = [line.split()[2] for line in lines if line.startswith("smoke: stage ")]
    assert stages == ["sample", "ingest", "validate", "split", "prepare", "train", "evaluate",
                      "export", "report"]
    assert lines[-1].startswith("smoke: OK in ")
    assert "unexpected_class" not in proc.stdout + proc.stderr


def test_the_subset_is_seeded_per_class_and_keeps_labels_csv_consistent(tmp_path):
    from stages.lib.io import read_csv
    from stages.tasks import get
    from tools.smoke import write_subset

    task = get("classification")
    folders = tmp_path / "folders"
    for c in ("a", "b"):
        for i in range(10):
            write_image(folders / c / f"{i}.png", seed=i)
    picks = [sorted(p.relative_to(tmp_path / d).as_posix()
                    for p in (tmp_path / d).rglob("*.png"))
             for d in ("s1", "s2") if write_subset(task, folders, tmp_path / d, 3, 7, {}) == 6]
    assert len(picks) == 2 and picks[0] == picks[1]  # the same seed, the same files
    assert sum(p.startswith("a/") for p in picks[0]) == 3
    write_subset(task, folders, tmp_path / "s3", 3, 8, {})
    assert sorted(p.relative_to(tmp_path / "s3").as_posix()
                  for p in (tmp_path / "s3").rglob("*.png")) != picks[0]
    assert {p.name for p in folders.rglob("*.png")} and len(list(folders.rglob("*.png"))) == 20

    flat = tmp_path / "flat"
    rows = []
    for i in range(12):
        write_image(flat / f"img{i}.png", seed=i)
        rows.append(f"img{i}.png,{'cat' if i % 2 else 'dog'}")
    (flat / "labels.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    assert write_subset(task, flat, tmp_path / "s4", 2, 0, {}) == 4
    kept = read_csv(tmp_path / "s4/labels.csv")
    assert sorted(r["path"] for r in kept) == sorted(
        p.name for p in (tmp_path / "s4").glob("*.png"))
    assert sorted(r["label"] for r in kept) == ["cat", "cat", "dog", "dog"]


@pytest.mark.e2e
def test_smoke_sample_uses_the_built_in_data_whatever_your_classes(own_data_project, tmp_path):
    """--sample: the built-in digits, even where data.source and validate.classes are yours."""
    run = copy_run(own_data_project, tmp_path / "run")
    set_params(run, {"validate.classes": ["blue", "green", "red"]})
    proc = run_tool("smoke", "--sample", "--per-class", "3", "--keep", cwd=run)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == "smoke: the built-in sample, 3 per class, 1 epoch(s)"
    assert any(line.startswith("smoke: OK in ") for line in proc.stdout.splitlines())
    import shutil
    from pathlib import Path

    from stages.lib.io import read_csv

    kept = Path(proc.stdout.splitlines()[-1].removeprefix("smoke: kept "))
    labels = {r["label"] for r in read_csv(kept / "data/manifest.csv")}
    shutil.rmtree(kept)
    assert labels == {str(d) for d in range(10)}  # the digits, not blue/green/red
    assert (run / "params.yaml").read_text().count("blue") == 1  # your workspace untouched
