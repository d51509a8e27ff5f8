"""Issue 13, prepare's speed: the workers bring back what the parent used to read serially
(every header, for the hints; every train pixel, for auto mean/std) and write shards without
copying them. Same lines, same meta, same bytes as before, whatever the worker count."""
import hashlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from stages.lib.data.shards import save_npy
from tests.conftest import run_stage
from tools.project import set_params

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("array", [
    np.arange(2 * 5 * 7 * 3, dtype=np.uint8).reshape(2, 5, 7, 3),
    np.zeros((0, 4, 4, 1), dtype=np.uint8),
    np.arange(9, dtype=np.int64),
    np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::-1],  # not contiguous
    np.zeros((2, 3), dtype=">i4"),
    np.ones((3, 2), dtype=np.float32),
    np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]),
    np.array(["ab", "c"]),
], ids=lambda a: f"{a.dtype}{a.shape}")
def test_shards_are_np_save_bytes(tmp_path, array):
    want = io.BytesIO()
    np.save(want, np.ascontiguousarray(array), allow_pickle=False)
    save_npy(tmp_path / "a.npy", array)
    assert (tmp_path / "a.npy").read_bytes() == want.getvalue()
    assert np.array_equal(np.load(tmp_path / "a.npy"), array)
    assert [p.name for p in tmp_path.iterdir()] == ["a.npy"]  # no temp file left
    # pending: the same bytes once committed (prepare: a worker writes, the parent commits)
    from stages.lib.io import commit

    tmp = save_npy(tmp_path / "b.npy", array, pending=True)
    assert not (tmp_path / "b.npy").exists()
    commit(tmp, tmp_path / "b.npy")
    assert (tmp_path / "b.npy").read_bytes() == want.getvalue()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "b.npy"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_shard_stops_prepare_and_leaves_no_temp_file(tmp_path, workers):
    """A file that cannot be decoded, in the last train shard: prepare fails (the other
    worker's shards do not go on), and no temp file of a shard is left in data/processed."""
    make_dataset(tmp_path)
    (tmp_path / "src/2/035.gif").write_bytes(b"GIF89a not really")  # train row 35 of 36
    set_params(tmp_path, {"prepare.image_size": 16, "prepare.channels": 1,
                          "prepare.workers": workers})
    proc = run_stage("prepare", cwd=tmp_path)
    assert proc.returncode != 0
    assert "035.gif" in proc.stderr
    left = [p.name for p in (tmp_path / "data/processed").rglob("*")]
    assert not [name for name in left if name.endswith(".tmp")], left
    assert not (tmp_path / "data/processed/meta.json").exists()


def make_dataset(root: Path) -> None:
    """60 real files in 3 classes: RGB JPEGs and PNGs, grey PNGs, a grey-palette GIF, of
    sides 9..70 px, and split files of 36/12/12 rows."""
    rng = np.random.default_rng(13)
    rows = []
    for i in range(60):
        label = str(i % 3)
        w, h = (int(v) for v in rng.integers(9, 71, 2))
        kind = i % 4
        path = root / "src" / label / f"{i:03d}.{['jpg', 'png', 'png', 'gif'][kind]}"
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind in (0, 1):
            img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
        else:
            img = Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
            if kind == 3:
                img = img.convert("P")
        img.save(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        rows.append(f"{label}/{path.name},{label},{digest}")
    (root / "data/split").mkdir(parents=True)
    for name, part in (("train", rows[:36]), ("val", rows[36:48]), ("test", rows[48:])):
        (root / "data/split" / f"{name}.csv").write_text("path,label,sha256\n"
                                                       + "\n".join(part) + "\n")
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    set_params(root, {"data.source": str(root / "src"), "prepare.shard_size": 5})


def digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("mode", ["explicit", "auto"])
def test_prepare_lines_and_bytes_do_not_depend_on_workers(tmp_path, mode):
    """The hints (explicit size/channels: gathered by the workers while decoding) and the auto
    choices (headers read in parallel first, mean/std from the workers' value counts) are the
    lines and values the serial passes give; shards and meta are the same for 1 and 2 workers."""
    from stages.lib.data.autoprep import resolve_norm
    from stages.lib.modality.imagefit import resolve_shape
    from stages.lib.io import read_csv
    from stages.lib.params import load
    from stages.lib.data.shards import samples_view

    make_dataset(tmp_path)
    if mode == "auto":
        set_params(tmp_path, {"prepare.image_size": "auto", "prepare.channels": "auto",
                              "prepare.mean": "auto", "prepare.std": "auto"})
    else:
        set_params(tmp_path, {"prepare.image_size": 24, "prepare.channels": 1})
    outs, trees = [], []
    for workers in (1, 2):
        set_params(tmp_path, {"prepare.workers": workers})
        proc = run_stage("prepare", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout.replace(f"({workers} worker{'s' if workers > 1 else ''})", ""))
        trees.append(digest(tmp_path / "data/processed"))
    assert outs[0] == outs[1]
    assert trees[0] == trees[1] and len(trees[0]) > 10

    # the serial passes of before: every header read by the parent, every train shard summed
    p = load("prepare", tmp_path / "params.yaml")
    splits = {n: read_csv(tmp_path / f"data/split/{n}.csv") for n in ("train", "val", "test")}
    _, _, lines = resolve_shape(p, splits, tmp_path / "src")
    for line in lines:
        assert line + "\n" in outs[0]
    assert "auto would choose" in outs[0] if mode == "explicit" else "(auto: " in outs[0]
    meta = json.loads((tmp_path / "data/processed/meta.json").read_text())
    view = samples_view("train", tmp_path / "data/processed")
    channels = meta["channels"]
    mean, std, _ = resolve_norm(p, channels, lambda: (view[a:a + 5] for a in range(0, 36, 5)))
    assert (meta["mean"], meta["std"]) == (mean, std)
    if mode == "auto":
        assert (meta["image_size"], channels) == (32, 3)
        assert "36 train images" in outs[0] and "30 of 60 images are colour" in outs[0]


def test_a_batch_read_names_a_truncated_shard(tmp_path):
    """The per-sample reads of a random batch check every read, like the slice reads."""
    from stages.lib.data.shards import samples_view, write_processed

    x = np.arange(12 * 2 * 2 * 1, dtype=np.uint8).reshape(12, 2, 2, 1)
    write_processed(tmp_path, {"train": (x, np.zeros(12, np.int64))},
                    {"mean": [0.5], "std": [0.5]}, shard_size=5)
    view = samples_view("train", tmp_path)
    assert np.array_equal(view[[11, 0, 7, 7]], x[[11, 0, 7, 7]])
    shard = tmp_path / "train/images-00001.npy"
    shard.write_bytes(shard.read_bytes()[:-6])  # samples 5..9: the last two cut
    view = samples_view("train", tmp_path)
    assert np.array_equal(view[[0, 11, 5]], x[[0, 11, 5]])
    with pytest.raises(OSError, match="images-00001.npy: short read"):
        view[[0, 9]]
