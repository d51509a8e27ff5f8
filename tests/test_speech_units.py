"""Speech pieces without a pipeline run (issue 40): the built-in sample's bytes and its held-out
voices, the CTC length rule against torch's own loss, the model's frames, the metrics with
greedy and beam decoding, and what init fits for one's own data."""
import hashlib
import io
import math
import wave

import numpy as np
import pytest

from stages.tasks.speech import TASK
from stages.tasks.speech import sample as speech_sample
from stages.tasks.speech.checks import STRIDE, frames, repeats

# sha256 over (path, NUL, bytes) of the sample with 12 clips: the bytes every machine must write
# (libespeak-ng from the pinned wheel and Festival from the Debian packages .ci/run pins, one
# fresh process per clip, float64 post-processing); clips 7-9 are Festival's three voices
SAMPLE_12 = "ec50784a60f2382062d09ac21027a4c0a29300bb2875b17ab3108e65b40b7254"


def test_sample_bytes_are_fixed_and_its_test_voices_are_never_trained_on(festival_installed):
    h = hashlib.sha256()
    files = list(speech_sample.clips(12))
    for rel, data in files:
        h.update(rel.encode() + b"\0" + data)
    assert h.hexdigest() == SAMPLE_12
    names = [rel for rel, _ in files]
    assert names[-3:] == ["train.tsv", "dev.tsv", "test.tsv"]
    lists = {rel: data.decode().splitlines() for rel, data in files[-3:]}
    voices = {rel: {line.split("\t")[0] for line in lines[1:]} for rel, lines in lists.items()}
    assert all(lines[0].split("\t") == list(speech_sample.COLUMNS) for lines in lists.values())
    synths = {rel: {line.split("\t")[3] for line in lines[1:]} for rel, lines in lists.items()}
    assert synths == {"train.tsv": {"espeak", "festival"}, "dev.tsv": {"espeak"},
                      "test.tsv": {"espeak"}}
    assert not voices["test.tsv"] & voices["train.tsv"]
    assert not voices["dev.tsv"] & voices["train.tsv"]
    for _, data in files[:-3]:
        with wave.open(io.BytesIO(data)) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
            assert 0.3 < w.getnframes() / 16000 <= speech_sample.MAX_SECONDS
    texts = [line.split("\t")[2] for lines in lists.values() for line in lines[1:]]
    assert all(2 <= len(t.split()) <= 6 and set(t) <= set(speech_sample.CHARSET)
               for t in texts)


def test_first_clips_do_not_depend_on_how_many_are_written(festival_installed):
    from stages.tasks.common import speech_synth

    voices = speech_sample.voices_by_split(speech_synth.variants())
    assert [speech_sample.plan(i, voices) for i in range(5)] == [
        speech_sample.plan(i, voices) for i in range(5)]
    assert len(voices["test"]) == len(speech_sample.HELD_OUT["test"]) == 8
    assert not set(voices["test"]) & set(voices["train"])


def test_festival_trains_and_the_test_and_val_clips_do_not_depend_on_it(festival_installed,
                                                                        monkeypatch):
    """Festival speaks about FESTIVAL_SHARE of the train clips, every one of its voices, at
    FESTIVAL_RATE; no val or test clip; and with Festival's share at 0 every val and test plan,
    and every espeak-ng train plan, is as before (Festival draws from its own generator)."""
    from stages.tasks.common import festival_synth, speech_synth

    voices = speech_sample.voices_by_split(speech_synth.variants())
    plans = [speech_sample.plan(i, voices) for i in range(speech_sample.CLIPS)]
    train = [p for p in plans if p["split"] == "train"]
    festival = [p for p in plans if p["synth"] == "festival"]
    assert all(p["split"] == "train" for p in festival)
    assert abs(len(festival) / len(train) - speech_sample.FESTIVAL_SHARE) < 0.05
    assert {p["voice"] for p in festival} == set(festival_synth.VOICES)
    lo, hi = speech_sample.FESTIVAL_RATE
    assert all(lo <= p["rate"] <= hi for p in festival)
    monkeypatch.setattr(speech_sample, "FESTIVAL_SHARE", 0.0)
    alone = [speech_sample.plan(i, voices) for i in range(speech_sample.CLIPS)]
    assert all(p["synth"] == "espeak" for p in alone)
    assert [p for p in plans if p["synth"] == "espeak"] == [
        q for p, q in zip(plans, alone, strict=True) if p["synth"] == "espeak"]


def test_the_sample_names_the_packages_when_festival_is_missing(monkeypatch):
    from stages.tasks.common import festival_synth, speech_synth

    from stages.lib.io import StageError

    monkeypatch.setattr(festival_synth, "voices", lambda: [])
    with pytest.raises(StageError, match="speech sample .* apt-get install -y festival "
                                           "festvox-kallpc16k festvox-kdlpc16k"):
        speech_sample.voices_by_split(speech_synth.variants())


def test_ctc_length_rule_matches_torchs_loss():
    """A transcript fits the clip when frames >= length + adjacent repeats: torch's CTC loss
    is finite exactly then."""
    import torch
    import torch.nn.functional as F

    geometry = (16000, 160, 3.2)
    for text, seconds in (("three", 0.2), ("three", 0.1), ("abba", 0.1), ("one two", 0.15)):
        t = frames(seconds, geometry)
        assert t == int(seconds * 16000) // 160 // STRIDE
        codes = torch.tensor([[ord(c) - 96 if c != " " else 27 for c in text]])
        logp = torch.randn(t, 1, 28).log_softmax(-1)
        loss = F.ctc_loss(logp, codes, torch.tensor([t]), torch.tensor([len(text)]))
        assert math.isfinite(loss.item()) == (t >= len(text) + repeats(text)), (text, t)
    assert frames(10.0, geometry) == frames(3.2, geometry)  # cropped as prepare crops


def test_model_emits_a_frame_per_stride_and_exports_its_shape():
    import torch

    meta = {"charset": list("abc "), "image_size": {"n_mels": 40, "frames": 321}}
    for name in TASK.models:
        model = TASK.build_model(name, meta).eval()
        with torch.no_grad():
            out = model(torch.zeros(2, 1, 40, 321))
        assert out.shape == (2, -(-321 // STRIDE), 5)
    assert TASK.head(model) == "head"


def test_metrics_greedy_and_beam_on_hand_made_logits(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from stages.lib.io import write_csv
    from stages.tasks.speech.metrics import evaluate

    monkeypatch.chdir(tmp_path)
    write_csv(tmp_path / "data/split/test.csv",
              [{"path": "a.wav", "text": "ab"}, {"path": "b.wav", "text": "ba"}],
              ["path", "text"])
    write_csv(tmp_path / "data/manifest.csv",
              [{"path": "a.wav", "duration": "0.4", "group": "v1"},
               {"path": "b.wav", "duration": "1.2", "group": "v2"}],
              ["path", "duration", "group"])
    charset = ["a", "b"]
    logits = np.full((2, 4, 3), -10.0, dtype=np.float32)
    for i, path in enumerate(([1, 0, 2, 0], [1, 1, 0, 0])):  # "ab" right, "a" for "ba"
        for t, c in enumerate(path):
            logits[i, t, c] = 10.0
    metrics, files, line = evaluate(logits, ["a.wav", "b.wav"], None, {"charset": charset},
                                    SimpleNamespace(bad_cases=0))
    assert metrics["cer"] == pytest.approx(1 / 4) and metrics["wer"] == pytest.approx(1 / 2)
    assert metrics["cer_beam"] == metrics["cer"] and metrics["clip_accuracy"] == 0.5
    assert files["cer_by_duration.csv"].decode().splitlines() == [
        "seconds,cer,clips", "0.0,0.000000,1", "1.0,0.500000,1"]
    assert "v2,1,0.500000,1.000000" in files["per_speaker.csv"].decode()
    assert "test CER 0.2500" in line


def test_init_fits_frames_to_the_longest_clip_of_any_split_and_refuses_image_sizes():
    """The gate refuses a clip over validate.max_seconds in whichever split it lies, so the fit
    covers the test clips too (a 9 s test clip, 4 s at most in train)."""
    fitted = {k: v for k, v, _ in TASK.fit_prepare([("train", 16000 * 2, 16000, True),
                                                    ("train", 44100 * 4, 44100, True),
                                                    ("test", 16000 * 9, 16000, True)])}
    assert fitted["prepare.audio"]["frames"] == 901  # 9.0 s at hop 160
    assert fitted["validate.max_seconds"] == 9.0
    fitted = {k: v for k, v, _ in TASK.fit_prepare([("train", 16000 * 2, 16000, True),
                                                    ("train", 44100 * 4, 44100, True)])}
    assert fitted["prepare.audio"]["frames"] == 401 and fitted["validate.max_seconds"] == 4.0

    from stages.lib.params import parse_all
    from stages.tasks import available, get

    params = parse_all({"task": "speech", "prepare": {"image_size": 64},
                        "train": {"model": "crnn"}}, "params.yaml")
    problems = TASK.param_problems(params, [get(n) for n in available() if n != "speech"])
    assert any("prepare.image_size: 64 is read by image tasks only" in p for p in problems)
    assert any("'crnn' is an ocr model" in p for p in problems)
