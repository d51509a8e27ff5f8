"""A tiny project state after `train`: real image files, the test split, data/processed and an
untrained (seeded) model.pt, so evaluate and export can run as subprocesses in seconds."""
import csv
import shutil
from pathlib import Path

import numpy as np

from tests.conftest import ROOT, write_image

CLASSES = ["cat", "dog", "eel"]
META = {"classes": CLASSES, "image_size": 8, "channels": 1, "mean": [0.5], "std": [0.5]}
PER_CLASS = 4


def make_fake_project(root) -> Path:
    import torch

    from stages.lib.modality.imagecore import load_image
    from stages.lib.model.models import save_model
    from stages.lib.data.shards import write_processed
    from stages.tasks.classification.model import build_model

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    rows = []
    for c, name in enumerate(CLASSES):
        for i in range(PER_CLASS):
            rel = f"{name}/{i:02d}.png"
            write_image(root / "data/source" / rel, size=(20, 20), seed=10 * c + i)
            rows.append({"path": rel, "label": name})
    (root / "data/split").mkdir(parents=True)
    with open(root / "data/split/test.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["path", "label"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    (root / "data/manifest.csv").write_text("path,label\n" + "".join(
        f"{r['path']},{r['label']}\n" for r in rows))
    x = np.stack([load_image(root / "data/source" / r["path"], 8, 1) for r in rows])
    y = np.array([CLASSES.index(r["label"]) for r in rows], dtype=np.int64)
    write_processed(root / "data/processed", {"test": (x, y)}, META, shard_size=5)  # 3 shards
    torch.manual_seed(0)
    model = build_model("small_cnn", len(CLASSES), 1).eval()
    save_model(root / "models/model.pt", model, {**META, "model": "small_cnn"})
    return root


def make_prepare_project(root) -> Path:
    """make_fake_project that prepare can run on: every split is the test split's images, and
    data.source points at them (tests/test_hardening.py's full-disk case and
    bench/prepare_full_disk.py)."""
    root = make_fake_project(root)
    test_csv = (root / "data/split/test.csv").read_text()
    for split in ("train", "val"):
        (root / f"data/split/{split}.csv").write_text(test_csv)
    (root / "params.yaml").write_text((root / "params.yaml").read_text().replace(
        "data/sample", "data/source"))
    return root


def limit_file_size(nbytes):
    """A preexec_fn that sets RLIMIT_FSIZE: a write past nbytes fails with EFBIG (a full
    disk, for one process and its children)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return limit


def read_rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
