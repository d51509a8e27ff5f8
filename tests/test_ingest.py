import csv

from stages.ingest import build_manifest, list_files
from tests.conftest import run_stage, write_image


def make_tree(root):
    write_image(root / "cat" / "a.png", seed=1)
    write_image(root / "cat" / "b b ü.jpg", mode="RGB", fmt="JPEG", seed=2)
    write_image(root / "dog" / "c.png", seed=3)
    (root / "dog" / "broken.png").write_bytes(b"not an image at all")
    (root / "dog" / ".hidden.png").write_bytes(b"skip me")
    (root / ".dvc").mkdir()
    (root / ".dvc" / "x").write_text("skip")
    write_image(root / "stray.png", seed=4)


def test_list_files_skips_hidden_and_sorts(tmp_path):
    make_tree(tmp_path)
    assert list_files(tmp_path) == ["cat/a.png", "cat/b b ü.jpg", "dog/broken.png", "dog/c.png",
                                    "stray.png"]


def test_manifest_rows_name_every_file_and_its_problem(tmp_path):
    make_tree(tmp_path)
    rows = {r["path"]: r for r in build_manifest(tmp_path, workers=2)}
    assert rows["cat/a.png"]["label"] == "cat" and rows["cat/a.png"]["error"] == ""
    assert rows["cat/a.png"]["format"] == "PNG" and rows["cat/a.png"]["width"] == 16
    assert rows["cat/b b ü.jpg"]["mode"] == "RGB"
    assert rows["dog/broken.png"]["error"].startswith("cannot decode")
    assert "class folder" in rows["stray.png"]["error"]
    import hashlib
    assert rows["dog/c.png"]["sha256"] == hashlib.sha256(
        (tmp_path / "dog/c.png").read_bytes()).hexdigest()


def test_workers_do_not_change_the_manifest(tmp_path):
    make_tree(tmp_path)
    assert build_manifest(tmp_path, workers=1) == build_manifest(tmp_path, workers=2)


def test_stage_writes_manifest_and_rejects_missing_source(in_tmp):
    make_tree(in_tmp / "imgs")
    (in_tmp / "params.yaml").write_text("data:\n  source: imgs\ningest:\n  workers: 1\n")
    assert run_stage("ingest", cwd=in_tmp).returncode == 0
    with open(in_tmp / "data/manifest.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["path"] for r in rows] == list_files(in_tmp / "imgs")
    (in_tmp / "params.yaml").write_text("data:\n  source: nowhere\n")
    proc = run_stage("ingest", cwd=in_tmp)
    assert proc.returncode != 0 and "data.source: nowhere" in proc.stderr
