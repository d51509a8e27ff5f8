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
