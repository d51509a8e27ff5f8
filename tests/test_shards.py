"""prepare's shards: byte-identical whatever the worker count, read back exactly by the views
that train, evaluate and export use, never a whole split in memory."""
import hashlib
import shutil

import numpy as np
import pytest

from stages.lib.modality.imagecore import normalize
from stages.lib.data.shards import samples_view, load_split, write_processed
from tests.conftest import run_stage


def tree_digest(root) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_prepare_bytes_do_not_depend_on_workers(trained_project, tmp_path):
    """workers 1 and 2, shards of 7 images (so several shards per split and a short last one):
    the same bytes in every file under data/processed, the same pixels as one decode loop."""
    import yaml

    root = tmp_path / "p"
    for rel in ("data/split", "data/sample"):
        shutil.copytree(trained_project / rel, root / rel)
    shutil.copy(trained_project / "params.yaml", root / "params.yaml")
    digests = []
    for workers in (1, 2):
        params = yaml.safe_load((root / "params.yaml").read_text())
        params["prepare"].update(workers=workers, shard_size=7)
        (root / "params.yaml").write_text(yaml.safe_dump(params))
        proc = run_stage("prepare", cwd=root)
        assert proc.returncode == 0, proc.stderr
        assert f"({workers} worker" in proc.stdout
        digests.append(tree_digest(root / "data/processed"))
    assert digests[0] == digests[1]
    assert len([f for f in digests[0] if f.startswith("train/images-")]) > 2
    # the same pixels as decoding the files one by one
    from stages.lib.modality.imagecore import load_image
    from stages.lib.io import read_csv

    rows = read_csv(root / "data/split/val.csv")
    want = np.stack([load_image(root / "data/sample" / r["path"], 16, 1) for r in rows])
    got = samples_view("val", root / "data/processed")
    assert np.array_equal(got[:], want)


@pytest.mark.parametrize("shard_size", [1, 5, 64])
def test_views_read_what_was_written(tmp_path, shard_size):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (23, 4, 4, 3), dtype=np.uint8)
    y = rng.integers(0, 9, 23).astype(np.int64)
    meta = {"classes": list("abcdefghi"), "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.3, 0.4]}
    write_processed(tmp_path, {"train": (x, y)}, meta, shard_size)
    xv, yv, m = load_split("train", tmp_path)
    whole = normalize(x, meta["mean"], meta["std"])
    assert m["counts"] == {"train": 23} and len(xv) == 23 and xv.shape == whole.shape
    idx = rng.permutation(23)[:11]
    for key in (slice(None), slice(3, 19), slice(22, 40), idx, idx.tolist(), 0, 22, -1):
        assert np.array_equal(xv[key], whole[key]), key  # bit-equal floats, per batch
        assert np.array_equal(yv[key], y[key]), key
    assert np.array_equal(xv.head(7)[:], whole[:7]) and len(xv.head(7)) == 7
    import pickle

    import torch

    tv, ty, _ = load_split("train", tmp_path, torch=True)
    tv[3]  # opens a map; a pickled view (a DataLoader worker's) must not carry it
    clone = pickle.loads(pickle.dumps(tv))
    assert torch.equal(clone[torch.tensor(idx)], torch.from_numpy(whole[idx]))
    assert torch.equal(ty[torch.tensor(idx)], torch.from_numpy(y[idx]))
    with pytest.raises(IndexError):
        xv[23]
