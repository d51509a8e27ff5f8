"""bench/speech_peer.py's pieces on real clips: Festival's digit strings (tools.synth_speech's
renderer) and PocketSphinx with the digits grammar reading them; the keyword grammar allows one
word only. The whole bench needs a finished speech run (docs/benchmarks.md)."""
import shutil

import pytest

from bench import speech_peer
from stages.tasks.common import festival_synth
from tests.conftest import missing_tool
from tests.test_hardening4_audio import audio_model, tone, wav  # noqa: F401 - its fixture


@pytest.fixture(autouse=True)
def tools_installed():
    if not shutil.which("festival") or festival_synth.voices() != list(festival_synth.VOICES):
        missing_tool("Festival and its English voices",
                     f"apt-get install -y {festival_synth.PACKAGES}")
    if not shutil.which("pocketsphinx_batch"):
        missing_tool("PocketSphinx", "apt-get install -y pocketsphinx pocketsphinx-en-us")


def test_festival_digit_clips_are_read_by_pocketsphinx_with_the_digits_grammar(tmp_path):
    from stages.tasks.speech.sample import WORDS

    clips = speech_peer.festival_clips("speech", 6, 55, tmp_path / "festival")
    assert [c[0].rsplit("/", 1)[1] for c in clips] == [f"{i:06d}.wav" for i in range(6)]
    assert all(2 <= len(t.split()) <= 5 and set(t.split()) <= set(WORDS) for _, t in clips)
    (tmp_path / "work").mkdir()
    said, cpu = speech_peer.sphinx(clips, "speech", WORDS, tmp_path / "work")
    assert len(said) == 6 and cpu > 0
    assert all(set(s.split()) <= set(WORDS) for s in said)  # the grammar's words only
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
