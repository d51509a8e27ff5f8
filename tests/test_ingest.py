import csv
import marshal
import os

import pytest

from stages.ingest import build_manifest, inventory, list_files, manifest_fields
from stages.tasks import default_task
from stages.lib.io import write_csv
from tests.conftest import run_stage, write_image

FIELDS = manifest_fields(default_task())


def make_tree(root):
    write_image(root / "cat" / "a.png", seed=1)
    write_image(root / "cat" / "b b ü.jpg", mode="RGB", fmt="JPEG", seed=2)
    write_image(root / "dog" / "c.png", seed=3)
    (root / "dog" / "broken.png").write_bytes(b"not an image at all")
    (root / "dog" / ".hidden.png").write_bytes(b"skip me")
    (root / ".dvc").mkdir()
    (root / ".dvc" / "x").write_text("skip")
    write_image(root / "stray.png", seed=4)
    backdate(root)


def backdate(root, seconds=3600):
    """Every file's mtime an hour back: a file modified in the second an ingest run starts is
    racy and rehashed by the next run (git's rule), which a warm-run test must not hit."""
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            st = path.stat()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - seconds * 10**9))


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
    assert str(tmp_path) not in rows["dog/broken.png"]["error"]  # no absolute paths in outs
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


def test_links_empty_folders_and_odd_names_are_rows_not_omissions(tmp_path):
    root = tmp_path / "src"
    make_tree(root)
    write_image(tmp_path / "outside.png")
    os.symlink("../../outside.png", root / "cat" / "escape.png")
    os.symlink("a.png", root / "cat" / "inside link.png")
    (root / "empty class").mkdir()
    rows = {r["path"]: r for r in build_manifest(root, workers=1)}
    assert rows["cat/escape.png"]["error"].startswith("symlink escapes data.source")
    assert rows["cat/escape.png"]["sha256"] == ""  # never read
    assert rows["cat/inside link.png"]["error"] == ""
    assert rows["cat/inside link.png"]["sha256"] == rows["cat/a.png"]["sha256"]
    assert rows["empty class/"]["error"].startswith("empty class folder")
    assert rows["cat/b b ü.jpg"]["error"] == ""


def test_labels_csv_gives_labels_groups_and_timestamps(tmp_path):
    root = tmp_path / "src"
    write_image(root / "x" / "1.png", seed=1)
    write_image(root / "2.png", seed=2)
    write_image(root / "3.png", seed=3)
    write_csv(root / "labels.csv", [
        {"path": "x/1.png", "label": "cat", "group": "g1", "timestamp": "2024-01-01"},
        {"path": "2.png", "label": "dog", "group": "g1", "timestamp": "2024-01-02"},
        {"path": "gone.png", "label": "dog", "group": "", "timestamp": ""},
    ], ["path", "label", "group", "timestamp"])
    rows = {r["path"]: r for r in build_manifest(root, workers=1)}
    assert set(rows) == {"x/1.png", "2.png", "3.png", "gone.png"}  # labels.csv is no image
    assert (rows["x/1.png"]["label"], rows["x/1.png"]["group"]) == ("cat", "g1")
    assert rows["2.png"]["timestamp"] == "2024-01-02" and rows["2.png"]["error"] == ""
    assert rows["3.png"]["error"].startswith("unlabelled")
    assert rows["gone.png"]["error"].startswith("missing")


def test_cache_never_changes_the_manifest_and_a_warm_run_rehashes_nothing(tmp_path):
    root = tmp_path / "src"
    make_tree(root)
    cache = tmp_path / "cache.marshal"
    cold, stats = inventory(root, 2, 0, cache)
    assert stats["inspected"] == stats["files"] == 5 and stats["cached"] == 0
    written = cache.stat().st_mtime_ns
    warm, stats = inventory(root, 2, 0, cache)
    assert warm == cold and stats["inspected"] == 0 and stats["cached"] == 5
    assert cache.stat().st_mtime_ns == written  # an unchanged tree does not rewrite the cache
    assert inventory(root, 2, 0, None)[0] == cold  # no cache: same rows
    write_image(root / "cat" / "a.png", seed=99)  # changed content: rehashed
    os.utime(root / "cat" / "a.png", ns=(1, 1))
    changed, stats = inventory(root, 2, 0, cache)
    assert stats["inspected"] == 1
    (root / "dog" / "c.png").unlink()  # a removed file is dropped from the cache
    inventory(root, 2, 0, cache)
    assert "dog/c.png" not in {r["path"] for r in marshal.loads(cache.read_bytes())["rows"]}
    assert {r["path"]: r for r in changed}["cat/a.png"] == {
        r["path"]: r for r in inventory(root, 1, 0, None)[0]}["cat/a.png"]


def test_stage_manifest_is_byte_identical_with_and_without_cache(in_tmp):
    make_tree(in_tmp / "imgs")
    (in_tmp / "params.yaml").write_text("data:\n  source: imgs\n")
    outputs, reports = [], []
    for args in ((), (), ("--no-cache",)):
        proc = run_stage("ingest", *args, cwd=in_tmp)
        assert proc.returncode == 0, proc.stderr
        outputs.append((in_tmp / "data/manifest.csv").read_bytes())
        reports.append(proc.stdout)
    assert "5 hashed" in reports[0] and "0 hashed, 5 unchanged" in reports[1]
    assert "5 hashed" in reports[2]
    assert outputs[0] == outputs[1] == outputs[2]
    assert outputs[0].decode().splitlines()[0] == ",".join(FIELDS)
    assert list((in_tmp / ".cache" / "ingest").glob("*.marshal"))


def test_a_folder_that_cannot_be_listed_is_an_error_naming_it(tmp_path):
    """Never a silent skip: a folder ingest cannot open stops it with the folder's name."""
    from stages.ingest import walk
    from stages.lib.io import StageError

    with pytest.raises(StageError, match="gone: cannot list this folder"):
        walk(tmp_path / "gone")


def test_a_damaged_cache_is_only_a_miss(tmp_path):
    """A cache file that is not marshal data, data of another shape, entries of the wrong
    shape: those files are hashed again and the manifest is the same as without a cache."""
    root = tmp_path / "src"
    make_tree(root)
    cache = tmp_path / "cache.marshal"
    clean = inventory(root, 1, 0, None)[0]
    for damage in (b"\x00garbage", marshal.dumps([1, 2]), marshal.dumps({"fields": ["other"]}),
                   marshal.dumps({"fields": FIELDS, "listing": "x", "rows": []})):
        cache.write_bytes(damage)
        rows, stats = inventory(root, 1, 0, cache)
        assert rows == clean and stats["inspected"] == 5, damage
    data = marshal.loads(cache.read_bytes())
    data["listing"].append(("ghost/", "empty", None))  # no whole-tree shortcut
    facts = data["facts"]
    facts["cat/a.png"] = "text"
    facts["cat/b b ü.jpg"] = facts["cat/b b ü.jpg"][:-1]
    facts["dog/c.png"] = None
    cache.write_bytes(marshal.dumps(data))
    rows, stats = inventory(root, 1, 0, cache)
    assert rows == clean and stats["inspected"] == 3
    cache.write_bytes(marshal.dumps({**data, "listing": [("x",)]}))  # a damaged listing
    rows, stats = inventory(root, 1, 0, cache)
    assert rows == clean and stats["inspected"] == 5


def test_a_warm_run_returns_the_cached_rows_only_when_nothing_changed(tmp_path):
    """The whole-tree shortcut: same listing (paths, kinds, sizes, mtimes, labels.csv) gives the
    cached rows; a new labels.csv, a touched file or a new empty folder does not."""
    root = tmp_path / "src"
    make_tree(root)
    cache = tmp_path / "cache.marshal"
    inventory(root, 1, 0, cache)
    data = marshal.loads(cache.read_bytes())
    data["rows"][0]["label"] = "from the cache"  # marks rows that came from the shortcut
    cache.write_bytes(marshal.dumps(data))
    assert inventory(root, 1, 0, cache)[0][0]["label"] == "from the cache"
    for change in (lambda: (root / "dog" / "new").mkdir(),
                   lambda: os.utime(root / "cat" / "a.png", ns=(5, 5)),
                   lambda: (root / "labels.csv").write_text("path,label\ncat/a.png,cat\n")):
        change()
        cache.write_bytes(marshal.dumps(data))
        rows = inventory(root, 1, 0, cache)[0]
        assert all(r["label"] != "from the cache" for r in rows)
        assert rows == inventory(root, 1, 0, None)[0]
