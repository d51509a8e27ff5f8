import hashlib

from stages.split import assign, split_rows


def rows(n, start=0, label="x"):
    return [{"path": f"{label}/{i}.png", "label": label,
             "sha256": hashlib.sha256(f"{label}{i}".encode()).hexdigest()}
            for i in range(start, start + n)]


def where(splits):
    return {r["path"]: name for name, part in splits.items() for r in part}


def test_ratios_are_roughly_the_params():
    out = split_rows(rows(4000), seed=1, val=0.15, test=0.15)
    assert abs(len(out["test"]) / 4000 - 0.15) < 0.03
    assert abs(len(out["val"]) / 4000 - 0.15) < 0.03


def test_adding_files_never_moves_an_existing_one():
    old = where(split_rows(rows(500), 7, 0.2, 0.2))
    new = where(split_rows(rows(500) + rows(100, start=500), 7, 0.2, 0.2))
    assert all(new[p] == s for p, s in old.items())


def test_same_content_lands_in_one_split_and_seed_matters():
    sha = hashlib.sha256(b"same").hexdigest()
    assert len({assign(sha, 3, 0.3, 0.3) for _ in range(5)}) == 1
    assert where(split_rows(rows(300), 1, 0.2, 0.2)) != where(split_rows(rows(300), 2, 0.2, 0.2))


def test_adding_twenty_percent_real_files_moves_no_old_one(tmp_path):
    from stages.ingest import build_manifest
    from tests.conftest import write_image

    for i in range(100):
        write_image(tmp_path / f"c{i % 3}" / f"{i}.png", seed=i)
    before = where(split_rows(build_manifest(tmp_path, 2), 5, 0.2, 0.2, distance=4))
    for i in range(100, 120):
        write_image(tmp_path / f"c{i % 3}" / f"{i}.png", seed=i)
    after = where(split_rows(build_manifest(tmp_path, 2), 5, 0.2, 0.2, distance=4))
    assert len(after) == 120 and all(after[p] == s for p, s in before.items())


def test_duplicates_near_duplicates_and_groups_never_straddle_splits(tmp_path):
    from stages.ingest import build_manifest
    from stages.lib.params import Validate
    from tests.corrupt import NEAR_PAIRS, build

    bad, _ = build(tmp_path / "raw")
    rows = [r for r in build_manifest(tmp_path / "raw", 2) if r["path"] not in bad]
    for i, r in enumerate(sorted(rows, key=lambda r: r["path"])):
        r["group"] = f"g{i // 2}" if "near" not in r["path"] else ""  # pairs share a group
    pairs = list(NEAR_PAIRS)
    pairs.append(("cat/cat0.png", "cat/cat0 copy.png"))  # same bytes
    by_group = {}
    for r in rows:
        if r["group"]:
            by_group.setdefault(r["group"], []).append(r["path"])
    pairs += [tuple(g) for g in by_group.values() if len(g) == 2]
    sha = {r["path"]: r["sha256"] for r in rows}
    alone = {p: assign(sha[p], 42, 0.15, 0.15) for p in sha}
    assert any(alone[a] != alone[b] for a, b in pairs)  # without grouping some would straddle
    for seed, frac in ((42, 0.15), (7, 0.3)):
        split = where(split_rows(rows, seed, frac, frac, distance=Validate().near_dup_distance))
        assert all(split[a] == split[b] for a, b in pairs)


def test_new_member_may_move_an_old_file_and_the_log_says_so(tmp_path):
    from stages.split import moved

    old = rows(2)
    old[1]["group"] = "patient"
    first = split_rows(old, 3, 0.3, 0.3)
    previous = {r["path"]: [r["sha256"], s] for s, part in first.items() for r in part}
    for n in range(50):  # a newcomer whose hash puts the group elsewhere
        new = {"path": f"x/new{n}.png", "label": "x", "group": "patient",
               "sha256": "0" * 8 + hashlib.sha256(str(n).encode()).hexdigest()[8:]}
        second = split_rows(old + [new], 3, 0.3, 0.3)
        if where(second)[old[1]["path"]] != where(first)[old[1]["path"]]:
            break
    lines = moved(previous, second)
    assert lines == [f"split: x/1.png moved {where(first)['x/1.png']} -> "
                     f"{where(second)['x/1.png']}: new data joined its group (same content, "
                     f"near-duplicate or shared `group`)"]
    assert where(second)["x/0.png"] == where(first)["x/0.png"]  # not in the group: stays


def test_time_split_is_chronological_and_keeps_groups_whole():
    data = rows(100)
    for i, r in enumerate(data):
        r["timestamp"] = f"2024-01-01T00:{i // 60:02d}:{i % 60:02d}"
    data[5]["group"] = data[95]["group"] = "same-patient"
    out = split_rows(data, 1, 0.2, 0.2, by="time")
    stamps = {name: sorted(r["path"] for r in part) for name, part in out.items()}
    t = {r["path"]: r["timestamp"] for r in data}
    latest_train = max(t[p] for p in stamps["train"])
    assert all(t[p] > latest_train for p in stamps["val"] + stamps["test"]
               if p != data[5]["path"])
    assert max(t[p] for p in stamps["val"]) < min(t[p] for p in stamps["test"]
                                                  if p != data[5]["path"])
    assert where(out)[data[5]["path"]] == where(out)[data[95]["path"]] == "test"
    assert 55 <= len(stamps["train"]) <= 65


def test_time_split_names_files_without_timestamps():
    import pytest

    from stages.lib.io import StageError

    data = rows(3)
    data[0]["timestamp"], data[1]["timestamp"], data[2]["timestamp"] = "2024-01-01", "", "soon"
    with pytest.raises(StageError, match=r"x/1\.png, x/2\.png"):
        split_rows(data, 1, 0.2, 0.2, by="time")


def lookalike_rows(root, per_class=300):
    from stages.ingest import build_manifest
    from tests.lookalike import build

    build(root, per_class=per_class)
    rows = [r for r in build_manifest(root, 2) if not r["error"]]
    assert len(rows) == 8 * per_class
    return rows


def test_lookalike_classes_keep_their_shares_and_chaining_would_not(tmp_path):
    from collections import Counter

    from stages.lib.data.groups import group_keys
    from stages.lib.params import Split, Validate
    from stages.split import balance, plan
    from stages.tasks import default_task

    task, p, d = default_task(), Split(), Validate().near_dup_distance
    rows = lookalike_rows(tmp_path / "raw")
    where, keys = plan(rows, p.seed, p.val, p.test, "hash", d)
    assert balance(rows, where, keys, task, p.val, p.test, p.balance_z) == []
    sizes = Counter(keys.values())
    assert max(sizes.values()) <= 30  # of 300 per class: groups stay small
    assert len(sizes) > 1000

    chained = group_keys(rows, d, chain=True)  # the old rule, on the same files
    per_class = Counter((chained[r["path"]], r["label"]) for r in rows)
    assert max(per_class.values()) >= 140  # one chain swallows about half a class
    old_where = {r["path"]: assign(chained[r["path"]], p.seed, p.val, p.test) for r in rows}
    off = balance(rows, old_where, chained, task, p.val, p.test, p.balance_z)
    assert len(off) >= 3
    biggest = max(off, key=lambda f: f["groups"][0]["size"] if f["groups"] else 0)
    assert biggest["groups"][0]["size"] >= 100  # the check names the chain responsible


def test_growth_moves_only_files_whose_lookalike_chain_got_new_data(tmp_path):
    from stages.lib.data.groups import group_keys
    from stages.split import plan

    old_rows = lookalike_rows(tmp_path / "old", 300)
    new_rows = lookalike_rows(tmp_path / "new", 360)  # the same walks, 20% longer
    assert {r["path"]: r["sha256"] for r in old_rows}.items() <= \
        {r["path"]: r["sha256"] for r in new_rows}.items()
    before, _ = plan(old_rows, 42, 0.15, 0.15, "hash", 4)
    after, _ = plan(new_rows, 42, 0.15, 0.15, "hash", 4)
    chains = group_keys(new_rows, 4, chain=True)  # components of the grown data
    touched = {chains[r["path"]] for r in new_rows if r["path"] not in before}
    moved = [p for p in before if before[p] != after[p]]
    assert all(chains[p] in touched for p in moved)
    assert len(moved) <= 0.02 * len(before)  # measured: 19 of 2,400


def imbalanced_project(root, on_imbalance):
    """A project folder holding only what split reads: one class whose 60 files share one
    explicit group (they all land in one split), nine classes of independent files."""
    import yaml

    from stages.ingest import manifest_fields
    from stages.lib.io import write_csv
    from stages.tasks import default_task

    task = default_task()
    rows = []
    for c in range(10):
        for i in range(60):
            sha = hashlib.sha256(f"{c}-{i}".encode()).hexdigest()
            row = dict.fromkeys(manifest_fields(task), "")
            row.update(path=f"c{c}/{i}.png", label=f"c{c}", sha256=sha, width="8",
                       height="8", group="shoot" if c == 0 else "")
            rows.append(row)
    write_csv(root / "data/manifest.csv", rows, manifest_fields(task))
    write_csv(root / "data/quarantine.csv", [], ["path", "reason"])
    (root / "params.yaml").write_text(yaml.safe_dump({"split": {"on_imbalance": on_imbalance}}))


def test_a_class_off_its_target_warns_or_fails_naming_the_group(tmp_path):
    import json

    from tests.conftest import run_stage

    for policy in ("warn", "fail"):
        root = tmp_path / policy
        imbalanced_project(root, policy)
        proc = run_stage("split", cwd=root)
        out = proc.stdout + proc.stderr
        assert "class c0:" in out and "60 of its files in a group of 60" in out, out
        assert "c0/0.png" in out  # an example of the group
        assert all(f"class c{c}:" not in out for c in range(1, 10))
        if policy == "fail":
            assert proc.returncode != 0 and "split.on_imbalance" in out
        else:
            assert proc.returncode == 0, out
            metrics = json.loads((root / "metrics/split.json").read_text())
            assert metrics["balance"]["off_target"] >= 1  # c0: all 60 files in one split
            assert {f["class"] for f in metrics["balance"]["findings"]} == {"c0"}
            assert sum(metrics[s]["c0"] for s in ("train", "val", "test") if "c0" in metrics[s]) \
                == 60


def write_grey(path, pixels):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.astype("uint8"), "L").save(path)


def given_tree(root, with_val):
    """<root>/{train,val,test}/<class>/ of 32x32 smooth images; test holds an exact copy of a
    train image and a brightened one (a near-duplicate)."""
    import numpy as np

    from tests.lookalike import basis

    b = basis(32, 6)
    rng = np.random.default_rng(0)
    splits = ("train", "val", "test") if with_val else ("train", "test")
    pics = {}
    for s in splits:
        for c in ("a", "b"):
            for i in range({"train": 40, "val": 10, "test": 10}[s]):
                x = b.T @ rng.normal(0, 1, (6, 6)) @ b
                pics[f"{s}/{c}/{i}.png"] = np.clip(128 + 30 * x, 0, 255)
    for rel, pixels in pics.items():
        write_grey(root / rel, pixels)
    write_grey(root / "test/a/copy.png", pics["train/a/0.png"])
    write_grey(root / "test/a/brighter.png", np.clip(pics["train/a/1.png"] + 12, 0, 255))
    return pics


def test_given_folder_split_is_kept_val_carved_and_leakage_counted(tmp_path):
    from stages.ingest import build_manifest
    from stages.split import leakage, plan

    given_tree(tmp_path / "raw", with_val=False)
    rows = build_manifest(tmp_path / "raw", 2)
    assert {r["label"] for r in rows} == {"a", "b"} and not any(r["error"] for r in rows)
    assert {r["path"]: r["split"] for r in rows}["test/a/copy.png"] == "test"
    where, _ = plan(rows, 42, 0.25, 0.15, "given", 4)
    assert all(where[p] == "test" for p in where if p.startswith("test/"))
    carved = [p for p in where if p.startswith("train/") and where[p] == "val"]
    assert 8 <= len(carved) <= 32  # about 25% of the 80 train files
    again, _ = plan(rows, 42, 0.25, 0.15, "given", 4)
    assert again == where  # the same rule every time
    leaks = leakage(rows, where, 4)
    exact = leaks["train-test"]["exact"] + leaks["val-test"]["exact"]
    near = leaks["train-test"]["near"] + leaks["val-test"]["near"]
    assert exact == 1 and near >= 1
    examples = leaks["train-test"]["examples"] + leaks["val-test"]["examples"]
    assert any("test/a/copy.png" in e for e in examples)
    assert any("test/a/brighter.png" in e for e in examples)


def test_given_split_from_labels_csv_and_files_without_one_are_named(tmp_path):
    import pytest

    from stages.ingest import build_manifest
    from stages.lib.io import StageError, write_csv
    from stages.split import plan

    pics = given_tree(tmp_path / "raw", with_val=True)
    listed = [{"path": rel, "label": rel.split("/")[1], "split": rel.split("/")[0]}
              for rel in pics]
    write_csv(tmp_path / "raw/labels.csv", listed, ["path", "label", "split"])
    (tmp_path / "raw/test/a/copy.png").unlink()
    (tmp_path / "raw/test/a/brighter.png").unlink()
    rows = build_manifest(tmp_path / "raw", 2)
    where, _ = plan(rows, 42, 0.15, 0.15, "given", 4)
    assert where == {rel: rel.split("/")[0] for rel in pics}  # val given: nothing carved
    listed[3]["split"] = ""
    listed[5]["split"] = "holdout"
    write_csv(tmp_path / "raw/labels.csv", listed, ["path", "label", "split"])
    rows = build_manifest(tmp_path / "raw", 2)
    with pytest.raises(StageError, match="2 usable files have no split") as err:
        plan(rows, 42, 0.15, 0.15, "given", 4)
    assert listed[3]["path"] in str(err.value) and listed[5]["path"] in str(err.value)
    hashed, _ = plan(rows, 42, 0.15, 0.15, "hash", 4)  # only split.by given needs them
    assert len(hashed) == len(rows)


def test_a_split_of_the_datas_own_ignored_by_the_rule_is_warned_of(tmp_path):
    """Data that names its own val/test files (a test list, synth_ocr --test-set) under
    split.by hash: the stage warns, naming the counts, an example and the fix."""
    from stages.ingest import build_manifest
    from stages.split import ignored_own_split

    given_tree(tmp_path / "raw", with_val=True)
    rows = build_manifest(tmp_path / "raw", 2)
    [line] = ignored_own_split(rows, "hash")
    tests = sorted(r["path"] for r in rows if r["path"].startswith("test/"))
    vals = sorted(r["path"] for r in rows if r["path"].startswith("val/"))
    assert tests and vals
    assert f"{len(tests)} as test (e.g. {tests[0]})" in line and f"{len(vals)} as val" in line
    assert "split.by is hash" in line and "set split.by: given" in line
    assert ignored_own_split(rows, "given") == []
    assert ignored_own_split([{**r, "split": "train"} for r in rows], "time") == []
    assert ignored_own_split([{k: v for k, v in r.items() if k != "split"} for r in rows],
                             "hash") == []


def test_split_stage_keeps_a_given_split_and_reports_its_leakage(tmp_path):
    import json

    import yaml

    from stages.ingest import build_manifest, manifest_fields
    from stages.lib.io import read_csv, write_csv
    from stages.tasks import default_task
    from tests.conftest import run_stage

    given_tree(tmp_path / "raw", with_val=True)
    rows = build_manifest(tmp_path / "raw", 2)
    root = tmp_path / "project"
    write_csv(root / "data/manifest.csv", rows, manifest_fields(default_task()))
    write_csv(root / "data/quarantine.csv", [], ["path", "reason"])
    (root / "params.yaml").write_text(yaml.safe_dump({"split": {"by": "given"}}))
    proc = run_stage("split", cwd=root)
    assert proc.returncode == 0, proc.stderr
    for name in ("train", "val", "test"):
        listed = {r["path"] for r in read_csv(root / f"data/split/{name}.csv")}
        assert listed == {r["path"] for r in rows if r["path"].startswith(f"{name}/")}
    metrics = json.loads((root / "metrics/split.json").read_text())
    assert metrics["leakage"]["train-test"]["exact"] == 1
    assert metrics["leakage"]["train-test"]["near"] >= 1
    assert metrics["balance"]["checked"] is False
    assert "warning: train-test leakage in the given split: 1 contents in both" in proc.stdout
