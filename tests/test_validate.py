import json

from stages.ingest import FIELDS, build_manifest
from stages.lib.io import write_csv
from stages.validate import find_problems
from tests.conftest import run_stage, write_image


def test_problems_name_undecodable_and_too_small_files(tmp_path):
    write_image(tmp_path / "a" / "ok.png", size=(16, 16))
    write_image(tmp_path / "a" / "tiny.png", size=(4, 16))
    (tmp_path / "a" / "trunc.png").write_bytes((tmp_path / "a" / "ok.png").read_bytes()[:60])
    problems = dict(find_problems(build_manifest(tmp_path, 1), min_side=8))
    assert set(problems) == {"a/tiny.png", "a/trunc.png"}
    assert "too small" in problems["a/tiny.png"]
    assert "cannot decode" in problems["a/trunc.png"]


def test_stage_fails_naming_every_bad_file_and_counts_them(in_tmp):
    src = in_tmp / "imgs"
    for i in range(3):
        write_image(src / "a" / f"{i}.png", seed=i)
    (src / "a" / "zero.png").write_bytes(b"")
    (src / "b").mkdir()
    (src / "b" / "text.png").write_text("hello")
    write_csv(in_tmp / "data/manifest.csv", build_manifest(src, 1), FIELDS)
    (in_tmp / "params.yaml").write_text("validate:\n  min_side: 8\n")
    proc = run_stage("validate", cwd=in_tmp)
    assert proc.returncode != 0
    assert "a/zero.png" in proc.stderr and "b/text.png" in proc.stderr
    metrics = json.loads((in_tmp / "metrics/validation.json").read_text())
    assert metrics["invalid"] == 2 and metrics["valid"] == 3 and metrics["files"] == 5
