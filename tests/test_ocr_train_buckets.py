"""Width buckets in prepare and train (issue 20): prepare.width_buckets records each line's
bucket, its record cut at the bucket is exactly the line fitted to that width, every training
batch holds one bucket (every sample once per epoch, a pure function of (seed, epoch), the same
bucket on every DDP rank at each step), and a run killed mid-epoch resumes to the same bytes.
The end-to-end part reuses the session's tiny OCR run (ocr_project)."""
import os
import signal

import numpy as np
import pytest
import yaml

from stages.lib.train.augment import bucket_batches
from stages.lib.hooks import env_name
from tests.conftest import copy_run, run_stage

BUCKETS = [96, 144]  # + prepare.width 192
ALL = [*BUCKETS, 192]


def widths_of(n, seed=0):
    return np.random.default_rng(seed).choice(ALL, size=n, p=[0.5, 0.3, 0.2]).astype(np.uint16)


@pytest.mark.parametrize("n,bs", [(103, 8), (40, 32), (7, 3)])
def test_every_batch_one_bucket_every_sample_once(n, bs):
    widths = widths_of(n)
    for epoch in range(3):
        plan = bucket_batches(n, widths, bs, seed=5, epoch=epoch)
        seen = np.concatenate([idx.numpy() for idx, _ in plan])
        assert sorted(seen.tolist()) == list(range(n))
        for idx, width in plan:
            assert 1 <= len(idx) <= bs
            assert set(widths[idx.numpy()].tolist()) == {width}
        # at most one short batch per bucket
        per_bucket = {}
        for idx, width in plan:
            per_bucket.setdefault(width, []).append(len(idx))
        for sizes in per_bucket.values():
            assert sum(s < bs for s in sizes) <= 1


def test_batch_order_is_a_pure_function_of_seed_and_epoch():
    widths = widths_of(200)

    def key(plan):
        return [(idx.tolist(), w) for idx, w in plan]

    a = key(bucket_batches(200, widths, 16, seed=1, epoch=2))
    assert a == key(bucket_batches(200, widths, 16, seed=1, epoch=2))
    assert a != key(bucket_batches(200, widths, 16, seed=1, epoch=3))
    assert a != key(bucket_batches(200, widths, 16, seed=2, epoch=2))
    # the buckets are interleaved, not run one after another
    order = [w for _, w in bucket_batches(200, widths, 16, seed=1, epoch=2)]
    assert order != sorted(order)


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_ranks_share_the_bucket_of_every_step(world):
    n, bs = 101, 12
    widths = widths_of(n, seed=3)
    plans = [bucket_batches(n, widths, bs, 0, 1, rank, world) for rank in range(world)]
    assert len({len(plan) for plan in plans}) == 1  # the same number of steps on each rank
    covered = set()
    for step in zip(*plans, strict=True):
        assert len({w for _, w in step}) == 1
        assert len({len(idx) for idx, _ in step}) == 1
        for idx, width in step:
            assert set(widths[idx.numpy()].tolist()) == {width}
            covered |= set(idx.tolist())
    assert covered == set(range(n))
    single = [idx.tolist() for idx, _ in bucket_batches(n, widths, bs, 0, 1)]
    for s, step in enumerate(zip(*plans, strict=True)):  # rank::world of the global batch
        merged = sorted(i for idx, _ in step for i in idx.tolist())
        assert set(merged) == set(single[s])


def test_record_cut_at_its_bucket_is_the_line_fitted_to_that_width(tmp_path):
    """Real PNG lines of many widths: fit to [32, 192], cut at the bucket, equals fit to
    [32, bucket], and the pixels past the bucket are the pad value."""
    from PIL import Image

    from stages.lib.modality.imagecore import bucket_of, line_width, load_image

    rng = np.random.default_rng(0)
    for i, w in enumerate([20, 40, 95, 97, 143, 150, 200, 260, 400]):
        path = tmp_path / f"{i}.png"
        h = 24 + i % 3
        Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8)).save(path)
        full = load_image(path, [32, 192], 1)
        bucket = bucket_of(line_width((w, h), [32, 192]), ALL)
        assert bucket == next((b for b in ALL if b >= min(round(w * 32 / h), 192)), 192)
        assert np.array_equal(full[:, :bucket], load_image(path, [32, bucket], 1)), (w, bucket)
        pad = full[:, line_width((w, h), [32, 192]):]
        assert (pad == pad.reshape(-1)[0]).all() if pad.size else True


def set_params(run, **dotted):
    params = yaml.safe_load((run / "params.yaml").read_text())
    for key, value in dotted.items():
        section, name = key.split(".")
        params[section][name] = value
    (run / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True))


@pytest.fixture(scope="module")
def bucketed(ocr_project, tmp_path_factory):
    """The tiny OCR run re-prepared with prepare.width_buckets and trained for 2 epochs,
    checkpointing every 2 steps: models/model.pt of an uninterrupted run."""
    run = copy_run(ocr_project, tmp_path_factory.mktemp("trainbuckets") / "run")
    set_params(run, **{"prepare.width_buckets": BUCKETS, "train.epochs": 2,
                       "train.checkpoint_every_steps": 2})
    for stage in ("prepare", "train", "evaluate"):
        proc = run_stage(stage, cwd=run)
        assert proc.returncode == 0, proc.stderr
    return run


def test_prepare_records_each_lines_bucket(bucketed):
    from PIL import Image

    from stages.lib.io import read_csv, read_json
    from stages.lib.data.shards import samples_view, load_widths

    meta = read_json(bucketed / "data/processed/meta.json")
    assert meta["width_buckets"] == ALL
    root = bucketed / "data/processed"
    source = bucketed / yaml.safe_load((bucketed / "params.yaml").read_text())["data"]["source"]
    for split in ("train", "test"):
        widths = load_widths(split, root)
        rows = read_csv(bucketed / f"data/split/{split}.csv")
        assert len(widths) == len(rows)
        for row, width in zip(rows, widths.tolist(), strict=True):
            with Image.open(source / row["path"]) as img:  # by hand: scale to 32 px high
                scaled = min(round(img.width * 32 / img.height), 192)
            assert width == next(b for b in ALL if b >= scaled)
        assert len(set(widths.tolist())) > 1  # the sample's lines do spread over buckets
    images = samples_view("test", root)
    from stages.lib.modality.imagecore import load_image

    for i in range(0, len(rows), 17):  # stored record cut at its bucket == fitted there
        width = int(widths[i])
        assert np.array_equal(images[i][:, :width],
                              load_image(source / rows[i]["path"], [32, width], 1))


def test_killed_mid_epoch_resumes_to_the_same_model(bucketed, tmp_path):
    run = copy_run(bucketed, tmp_path / "run")
    for path in (run / "models").rglob("*.pt"):
        path.unlink()
    from stages.lib.data.shards import load_widths

    widths = load_widths("train", run / "data/processed")
    steps = len(bucket_batches(len(widths), widths, 32, 0, 1))  # epoch 2's batches
    assert steps >= 4
    kill = steps + 3  # mid epoch 2, past a checkpoint of epoch 2 (one every 2 steps)
    os.environ[env_name("KILL_AT_STEP")] = str(kill)
    try:
        killed = run_stage("train", cwd=run)
    finally:
        os.environ.pop(env_name("KILL_AT_STEP"))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = run_stage("train", cwd=run)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from models/checkpoints/last.pt" in resumed.stdout, resumed.stdout
    assert (run / "models/model.pt").read_bytes() == (bucketed / "models/model.pt").read_bytes()


def test_evaluate_runs_each_line_at_its_bucket(bucketed):
    """evaluate's text for a line is the model's at that line's bucket width (what predict and
    export's parity at that width run), and it says how many lines ran at each width."""
    import json

    import torch

    from stages.lib.data.shards import load_split
    from stages.lib.io import read_csv
    from stages.tasks import load_model
    from stages.lib.data.shards import load_widths
    from stages.tasks.common.ctc import greedy

    root = bucketed / "data/processed"
    metrics = json.loads((bucketed / "metrics/eval.json").read_text())
    widths = load_widths("test", root)
    assert metrics["width_buckets"] == {str(w): int((widths == w).sum()) for w in ALL
                                        if (widths == w).any()}
    model, meta = load_model(bucketed / "models/model.pt")
    model.eval()
    x, _, _ = load_split("test", root)
    texts = []
    with torch.no_grad():
        for i in range(len(x)):
            xi = np.ascontiguousarray(x[i:i + 1][..., :int(widths[i])])
            texts.append(greedy(model(torch.from_numpy(xi)).numpy(), meta["charset"])[0][0])
    rows = {r["path"]: r for r in read_csv(bucketed / "plots/eval/predictions.csv")}
    paths = [r["path"] for r in read_csv(bucketed / "data/split/test.csv")]
    assert [rows[p]["predicted"] for p in paths] == texts


def test_export_defaults_to_prepares_buckets(bucketed, tmp_path):
    """export.width_buckets: [] takes the model's (prepare's) list: parity at each bucket width,
    the list in the ONNX metadata for predict and serve."""
    import json

    import onnx

    run = copy_run(bucketed, tmp_path / "run")
    proc = run_stage("export", cwd=run)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((run / "metrics/export.json").read_text())
    assert sorted(metrics["widths"], key=int) == ["96", "144"]  # 192: the main check
    for width in ("96", "144"):
        assert metrics["widths"][width]["text_agreement"] == 1.0
    proto = onnx.load(str(run / "models/model.onnx"))
    props = {p.key: json.loads(p.value) for p in proto.metadata_props}
    assert props["width_buckets"] == ALL


def test_torch_backend_runs_lines_at_prepares_buckets(bucketed):
    from tools.inference import load_torch

    model = load_torch(bucketed / "models/model.pt")
    assert model.width_buckets == ALL
