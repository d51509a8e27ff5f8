"""The audio task's pieces without a pipeline run (issue 40): the sample's bytes, the layouts
(Speech Commands folders and split lists, labels.tsv), speakers as groups, init's fit, the
params it refuses, and the model's size."""
import hashlib

import pytest

from stages.lib.io import StageError
from stages.tasks import get
from stages.tasks.audio import annotations
from stages.tasks.audio.sample import HELD_OUT, VARIANTS, WORDS, clips, items, rendered

TASK = get("audio")
# sha256 over (path, NUL, bytes) of the sample's first 40 clips (2 voice variants x 20 words):
# the bytes every machine must write (libespeak-ng in a fresh process per text, numpy float64
# post-processing; see stages/tasks/audio/sample.py)
SAMPLE_40 = "2f3a19994a8230dc3f40bf6aae6530b66c1f9ebf35491f57314419d86e62f50e"
# sha256 of the first rendition of "yes" by each of Festival's voices (festival 1:2.5.0-9 and
# the voices' packages that .ci/run pins)
FESTIVAL_YES = {
    "kal_diphone": "b678d9ab156274a0db9440c4a08b65922f8e0b9c2a45910fc68a9a28ba225e04",
    "ked_diphone": "3735a1b84ee59777e8f38891aa5a6b7df3a7acbd94a2580f0a0303e0fb93c7ba",
    "cmu_us_slt_arctic_hts": "648a2fd6ec8c3b19dd9a17b375c098b8d9acdbbf836cccf4fd2b7bd009b16c77"}


def test_sample_bytes_are_fixed_and_every_word_and_voice_is_there():
    written = list(clips(per_class=2))
    wavs = [(rel, data) for rel, data in written if rel.endswith(".wav")]
    assert len(wavs) == 40
    assert [rel for rel, _ in wavs[:2]] == ["yes/m1_nohash_0.wav", "yes/f1_nohash_0.wav"]
    h = hashlib.sha256()
    for rel, data in wavs:
        h.update(rel.encode() + b"\0" + data)
    assert h.hexdigest() == SAMPLE_40
    assert {rel.split("/")[0] for rel, _ in wavs} == set(WORDS) and len(WORDS) == 20
    assert len(set(VARIANTS)) == len(VARIANTS) == 80
    again = dict(clips(per_class=1))  # a clip does not depend on which others are written
    assert all(again[rel] == data for rel, data in wavs if rel in again)


def test_festival_voices_train_and_the_held_out_voices_are_listed(festival_installed):
    """Festival's three voices speak every word (8 renditions each) after espeak-ng's variants,
    all in train; the split lists name exactly HELD_OUT's espeak-ng voices' clips among those
    written; a Festival clip's bytes are pinned."""
    from stages.tasks.common import festival_synth

    every = items()
    assert len(every) == 20 * (80 + 3 * 8)
    festival = [i for i in every if i[0] == "festival"]
    assert {v for _, _, v, _ in festival} == set(festival_synth.VOICES)
    assert not {v for _, _, v, _ in festival} & {v for h in HELD_OUT.values() for v in h}
    assert all(i[0] == "espeak" for i in items(per_class=80))  # a tiny sample: espeak-ng only
    lists = {rel: data.decode().splitlines() for rel, data in clips(per_class=14)
             if rel.endswith(".txt")}
    for name, split in annotations.SPLIT_LISTS.items():
        voices = {annotations.speaker(rel) for rel in lists[name]}
        assert voices == set(HELD_OUT[split]) & set(VARIANTS[:14]) and voices
        assert lists[name] == sorted(lists[name]) and len(lists[name]) == 20 * len(voices)
    part = [("festival", "yes", v, 0) for v in festival_synth.VOICES]
    got = {rel.split("/")[1].split("_nohash_")[0]: hashlib.sha256(data).hexdigest()
           for rel, data in rendered(part)}
    assert got == FESTIVAL_YES


def listing(paths):
    return [(p, "file", p) for p in paths]


def test_speech_commands_layout_reads_labels_speakers_and_its_own_split(tmp_path):
    (tmp_path / "validation_list.txt").write_text("yes/bob_nohash_0.wav\n")
    (tmp_path / "testing_list.txt").write_text("no/cat_nohash_1.wav\n\n")
    paths = ["yes/bob_nohash_0.wav", "yes/amy_nohash_0.wav", "no/cat_nohash_1.wav",
             "_background_noise_/white.wav", "README.md", "validation_list.txt",
             "testing_list.txt", "loose.wav"]
    found = TASK.read_annotations(tmp_path, listing(paths), {})
    assert found.values["yes/bob_nohash_0.wav"] == {"label": "yes", "group": "bob",
                                                    "timestamp": "", "split": "val"}
    assert found.values["yes/amy_nohash_0.wav"]["split"] == "train"
    assert found.values["no/cat_nohash_1.wav"] == {"label": "no", "group": "cat",
                                                   "timestamp": "", "split": "test"}
    assert {"_background_noise_/white.wav", "README.md", "validation_list.txt",
            "testing_list.txt"} <= found.skip
    assert found.errors == {"loose.wav": ("unlabelled", found.errors["loose.wav"][1])}
    assert "own split" in TASK.layout(found) and "speakers" in TASK.layout(found)


def test_labels_tsv_layout_names_missing_files_and_bad_lines(tmp_path):
    (tmp_path / "labels.tsv").write_text("a.wav\tyes\nb.flac\tno\nghost.wav\tyes\n")
    found = TASK.read_annotations(tmp_path, listing(["a.wav", "b.flac", "c.ogg"]), {})
    assert found.values["a.wav"]["label"] == "yes" and found.values["b.flac"]["label"] == "no"
    assert found.errors["c.ogg"][0] == "unlabelled"
    assert found.errors["ghost.wav"][0] == "missing" and "ghost.wav" in found.extra
    assert "labels.tsv" in found.skip and TASK.layout(found).startswith("labels.tsv")
    (tmp_path / "labels.tsv").write_text("a.wav yes\n")
    with pytest.raises(StageError, match=r"labels\.tsv:1: expected `path<TAB>label`"):
        TASK.read_annotations(tmp_path, listing(["a.wav"]), {})


def test_speaker_is_the_name_before_nohash():
    assert annotations.speaker("yes/0a7c2a8d_nohash_0.wav") == "0a7c2a8d"
    assert annotations.speaker("yes/plain.wav") == ""


def test_fit_prepare_covers_most_clips_within_bounds():
    facts = [("train", 16000 * s // 10, 16000, True) for s in (5, 8, 10, 10, 12)]
    fit = {k: v for k, v, _ in TASK.fit_prepare(facts)}
    assert fit["prepare.audio"] == {"sample_rate": 16000, "n_fft": 512, "hop": 160,
                                         "n_mels": 24, "frames": 101}
    # one's own keywords get the sample's bands (the recipe measured on another synthesizer)
    assert fit["prepare.audio"]["n_mels"] == TASK.sample_params["prepare.audio"]["n_mels"]
    assert fit["prepare.channels"] == 1 and fit["prepare.mean"] == "auto"
    long = {k: v for k, v, _ in TASK.fit_prepare([("train", 16000 * 60, 16000, True)])}
    assert long["prepare.audio"]["frames"] == 301  # at most 3 s


def test_params_of_another_task_or_an_image_size_are_refused(tmp_path):
    from stages.lib.params import parse_all
    from stages.tasks import check_params

    raw = {"task": "audio", "train": {"model": "small_cnn"}, "prepare": {"image_size": 32}}
    with pytest.raises(StageError) as info:
        check_params(TASK, parse_all(raw, "params.yaml"))
    assert "a classification model" in str(info.value)
    assert "prepare.image_size: 32 is read by image tasks only" in str(info.value)
    classification = get("classification")
    raw = {"train": {"aug_time_mask": 10}}
    with pytest.raises(StageError,
                       match=r"train\.aug_time_mask: 10 is read by audio( and speech)? only"):
        check_params(classification, parse_all(raw, "params.yaml"))


def test_the_model_has_a_few_hundred_thousand_parameters_and_takes_the_spec():
    import torch

    model = TASK.build_model("audio_cnn", {"classes": list("abcdefghijklmnopqrst"),
                                           "channels": 1})
    n = sum(p.numel() for p in model.parameters())
    assert 200_000 <= n <= 500_000
    out = model.eval()(torch.zeros(2, 1, 40, 101))
    assert out.shape == (2, 20)
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())


def test_sample_rate_check_reads_prepare_rate(tmp_path):
    from stages.lib.params import parse_all

    at_8k = TASK.check_settings(parse_all({"prepare": {"audio": {"sample_rate": 8000}}},
                                          "p.yaml"))
    rows = [{"path": "a.wav", "label": "yes", "sample_rate": 8000},
            {"path": "b.wav", "label": "yes", "sample_rate": 16000}]
    columns, counts = TASK.check_columns(rows, [True, True], None, at_8k)
    assert columns["sample_rate"] == [1, 0] and counts == {16000: 1}
    assert "not 8000 Hz" in TASK.reason("sample_rate", rows[1], None, counts, at_8k)
    default = TASK.check_settings(parse_all({}, "p.yaml"))  # a value, not state on the task
    assert TASK.check_columns(rows, [True, True], None, default)[0]["sample_rate"] == [0, 1]
    assert TASK.check_columns(rows, [True, True], None, at_8k)[0]["sample_rate"] == [1, 0]
