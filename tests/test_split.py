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
