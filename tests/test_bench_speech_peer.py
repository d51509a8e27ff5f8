"""bench/speech_peer.py's pieces on real clips: Festival's digit strings (tools.synth_speech's
renderer) and PocketSphinx with the digits grammar reading them; the keyword grammar allows one
word only. The whole bench needs a finished speech run (docs/benchmarks.md)."""
import shutil

import pytest

from bench import speech_peer
from tests.conftest import missing_tool, need_festival
from tests.test_hardening4_audio import audio_model, tone, wav  # noqa: F401 - its fixture


@pytest.fixture(autouse=True)
def tools_installed():
    need_festival()
    if not shutil.which("pocketsphinx_batch"):
        missing_tool("PocketSphinx", "apt-get install -y pocketsphinx pocketsphinx-en-us")


def test_festival_digit_clips_are_read_by_pocketsphinx_with_the_digits_grammar(tmp_path):
    from stages.tasks.speech.sample import WORDS

    clips = speech_peer.other_clips("speech", 6, 55, tmp_path / "festival")
    assert [c[0].rsplit("/", 1)[1] for c in clips] == [f"{i:06d}.wav" for i in range(6)]
    assert all(2 <= len(t.split()) <= 5 and set(t.split()) <= set(WORDS) for _, t in clips)
    (tmp_path / "work").mkdir()
    said, cpu = speech_peer.sphinx(clips, "speech", WORDS, tmp_path / "work")
    assert len(said) == 6 and cpu > 0
    assert all(set(s.split()) <= set(WORDS) for s in said)  # the grammar's words only
    assert speech_peer.score("speech", [t for _, t in clips], said)["cer"] < 0.3


def test_flite_clips_speak_each_voice_in_turn_the_same_bytes_twice(tmp_path):
    """--other flite: a synthesizer nothing in the project trains on, each of its voices in
    turn, 16 kHz mono; drawn again, the same bytes; PocketSphinx reads its digits."""
    import wave

    from bench import flite_synth
    from stages.tasks.speech.sample import WORDS

    if not shutil.which("flite"):
        missing_tool("Flite", f"apt-get install -y {flite_synth.PACKAGE}")
    assert speech_peer.other_voices("flite") == ["awb", "rms", "slt", "kal16"]
    clips = speech_peer.other_clips("speech", 8, 55, tmp_path / "a", "flite")
    again = speech_peer.other_clips("speech", 8, 55, tmp_path / "b", "flite")
    assert [t for _, t in clips] == [t for _, t in again]
    for (a, _), (b, _) in zip(clips, again, strict=True):
        assert open(a, "rb").read() == open(b, "rb").read()
        with wave.open(a) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
            assert 0.4 < w.getnframes() / 16000 < 4.0
    sizes = {open(a, "rb").read()[44:] for a, _ in clips}
    assert len(sizes) == 8  # every clip its own sound
    (tmp_path / "work").mkdir()
    said, _ = speech_peer.sphinx(clips, "speech", WORDS, tmp_path / "work")
    assert speech_peer.score("speech", [t for _, t in clips], said)["cer"] < 0.3


def test_the_keyword_grammar_answers_one_word():
    from stages.tasks.audio.sample import WORDS

    text = speech_peer.grammar("audio", WORDS)
    assert "public <line> = <word>;" in text and "<word> = yes | no | up" in text
    assert "public <line> = <word>+;" in speech_peer.grammar("speech", ["one", "two"])


def test_ours_reads_each_clip_through_the_models_spec(tmp_path, audio_model):  # noqa: F811
    """The bench's own side: each clip read with the model's input spec and predicted by the
    exported model in the run folder (a tiny keyword model favouring `yes`)."""
    (tmp_path / "models").mkdir()
    shutil.copy(audio_model, tmp_path / "models/model.onnx")
    clips = [(wav(tmp_path / f"{i}.wav", tone(16000, 0.3 + 0.2 * i)), "yes") for i in range(3)]
    texts, conf, cpu = speech_peer.ours(clips, tmp_path)
    assert texts == ["yes"] * 3 and all(0.5 < c <= 1 for c in conf) and cpu > 0


def test_ours_answers_as_predict_with_views_and_the_clip_alone_without(audio_project):
    """--views (the default): the test-time views, as evaluate scored the clips; --no-views:
    the task's decode of the clip's own outputs."""
    from stages.lib.io import read_csv
    from tools.inference import load

    bad = read_csv(audio_project / "plots/eval/bad_cases.csv")[:4]
    clips = [(str(audio_project / "data/sample" / r["path"]), r["true"]) for r in bad]
    texts, viewed, _ = speech_peer.ours(clips, audio_project)
    assert texts == [r["predicted"] for r in bad]
    assert viewed == pytest.approx([float(r["confidence"]) for r in bad], abs=1e-4)
    _, alone, _ = speech_peer.ours(clips, audio_project, views=False)
    model = load("onnxruntime", audio_project / "models/model.onnx")
    want = [model.task.decode(model.logits(model.modality.read(p, model.spec)[None]),
                              model.meta, 1)[0]["score"] for p, _ in clips]
    assert alone == pytest.approx(want, abs=1e-6)
    assert alone != pytest.approx(viewed, abs=1e-4)


def test_every_voice_says_every_keyword_and_digit_strings_take_voices_in_turn():
    """Clip i of the keyword set says keyword i mod 20: its voice moves on by one every 20
    clips, so 80 clips hold every (keyword, voice) pair once and a voice's figure is not a
    fifth of the keywords'; the digit strings keep voice i mod 4."""
    from stages.tasks.audio.sample import WORDS

    pairs = {(WORDS[i % 20], speech_peer.voice_index("audio", i, 4)) for i in range(80)}
    assert len(pairs) == 80
    assert [speech_peer.voice_index("audio", i, 4) for i in (0, 19, 20, 39, 40)] == [0, 3, 1, 0,
                                                                                     2]
    assert [speech_peer.voice_index("speech", i, 4) for i in range(6)] == [0, 1, 2, 3, 0, 1]
