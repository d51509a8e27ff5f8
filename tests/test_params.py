import dataclasses

import pytest
import yaml

from stages.lib import params
from stages.lib.io import StageError
from tests.conftest import ROOT, run_stage


def write(tmp_path, data):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_project_params_file_sets_every_documented_key():
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    for name, cls in params.SECTIONS.items():
        loaded = params.load(name, ROOT / "params.yaml")
        assert isinstance(loaded, cls)
        # a modality's own keys (audio's gate and SpecAugment) are not in an image task's file
        assert set(raw[name]) == {f.name for f in dataclasses.fields(cls)
                                  if f"{name}.{f.name}" not in params.MODALITY_KEYS}, name


def test_modality_keys_at_their_defaults_hash_as_before_they_existed():
    """Adding audio's keys changed no image task's hashes: at their defaults they are dropped
    from what provenance, the report and the checkpoint fingerprint hash."""
    assert {"validate.min_seconds", "train.aug_time_mask"} <= set(params.MODALITY_KEYS)
    train = dataclasses.asdict(params.Train())
    kept = params.without_placement("train", train)
    assert "aug_time_mask" not in kept and "lr" in kept
    assert "aug_time_mask" in params.without_placement("train", {**train, "aug_time_mask": 8})


def test_audio_spec_is_a_mapping_of_known_keys(tmp_path):
    path = write(tmp_path, {"prepare": {"audio": {"n_mels": 64, "hop": 128}}})
    assert params.load("prepare", path).audio == {"n_mels": 64, "hop": 128}
    path = write(tmp_path, {"prepare": {"audio": {"n_mel": 64}}})
    with pytest.raises(StageError, match="prepare.audio: unknown key.*n_mel"):
        params.load("prepare", path)
    path = write(tmp_path, {"prepare": {"audio": {"hop": 1024}}})
    with pytest.raises(StageError, match="hop .1024. must be at most n_fft"):
        params.load("prepare", path)


def test_misspelt_key_is_named(tmp_path):
    path = write(tmp_path, {"train": {"lr_rate": 0.1}})
    with pytest.raises(StageError, match=r"unknown key `train\.lr_rate`"):
        params.load("train", path)


def test_unknown_section_is_named(tmp_path):
    path = write(tmp_path, {"trian": {"lr": 0.1}})
    with pytest.raises(StageError, match="trian"):
        params.load("train", path)


def test_wrong_type_is_named(tmp_path):
    path = write(tmp_path, {"train": {"epochs": "ten"}})
    with pytest.raises(StageError, match=r"`train\.epochs` must be of type int"):
        params.load("train", path)


def test_int_is_accepted_for_float_and_defaults_fill_in(tmp_path):
    path = write(tmp_path, {"train": {"lr": 1}})
    p = params.load("train", path)
    assert p.lr == 1.0 and isinstance(p.lr, float)
    assert p.epochs == params.Train().epochs


def test_list_items_are_typed(tmp_path):
    path = write(tmp_path, {"prepare": {"mean": [0.5, "x"]}})
    with pytest.raises(StageError, match=r"prepare\.mean\[1\]"):
        params.load("prepare", path)


def test_stage_fails_naming_misspelt_key(tmp_path):
    (tmp_path / "params.yaml").write_text("train:\n  lr_rate: 0.1\n")
    proc = run_stage("train", cwd=tmp_path)
    assert proc.returncode != 0
    assert "train.lr_rate" in proc.stderr
    assert "Traceback" not in proc.stderr
