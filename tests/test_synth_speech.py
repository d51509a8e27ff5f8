"""tools.synth_speech: texts spoken by espeak-ng's and Festival's voices, in the Common Voice
layout the speech task reads, each clip's synthesizer and voice in the list. Real runs of the
tool on a few texts: the pinned bytes of one clip per synthesizer, the same bytes from another
worker count, the list's columns and groups as the speech task reads them, the held-out split,
and the errors."""
import hashlib
import shutil
import wave

import pytest
from click.testing import CliRunner

from stages.tasks.common import festival_synth
from tests.conftest import missing_tool
from tools.synth_speech import main

TEXTS = "four one nine\nzero zero seven\n\nsay \"two\" it's eight\n"
PINNED = {  # clip: (synth, voice, sha256 of the WAV file) of --seed 3 --per-text 2
    "000000.wav": ("espeak", "rob",
                   "38929d9dbd3db396ca6b459b7e1daf8f9a8862a033f6393755b16e58610b7261"),
    "000001.wav": ("festival", "cmu_us_slt_arctic_hts",
                   "3105e9a60da7ac44092ed2b7f86786776c6f2c613ad05f333341ee1e62028235"),
}


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    if not shutil.which("festival") or festival_synth.voices() != list(festival_synth.VOICES):
        missing_tool("Festival and its English voices", f"apt-get install -y "
                                                         f"{festival_synth.PACKAGES}")
    path = tmp_path_factory.mktemp("texts") / "texts.txt"
    path.write_text(TEXTS, encoding="utf-8")
    return path


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def rows(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    return [dict(zip(lines[0].split("\t"), line.split("\t"), strict=True)) for line in lines[1:]]


def digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((folder / "clips").iterdir())}


def test_clips_lists_and_pinned_bytes_per_synthesizer(texts, tmp_path):
    out = tmp_path / "speech"
    code, said = run("--texts", texts, "--out", out, "--seed", 3, "--per-text", 2)
    assert code == 0, said
    listed = rows(out / "validated.tsv")
    assert list(listed[0]) == ["client_id", "path", "sentence", "synth", "voice"]
    assert [r["sentence"] for r in listed] == ["four one nine"] * 2 + ["zero zero seven"] * 2 \
        + ['say "two" it\'s eight'] * 2
    assert [r["synth"] for r in listed] == ["espeak", "festival"] * 3
    assert all(r["client_id"] == f"{r['synth']}:{r['voice']}" for r in listed)
    found = digests(out)
    assert {name: (r["synth"], r["voice"], found[name]) for r in listed
            for name in [r["path"]] if name in PINNED} == PINNED
    for r in listed:
        with wave.open(str(out / "clips" / r["path"])) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
            assert 0.3 < w.getnframes() / 16000 < 5
    # the same bytes from another worker count; the seed changes them; a rerun replaces out
    code, said = run("--texts", texts, "--out", out, "--seed", 3, "--per-text", 2,
                     "--workers", 1)
    assert code == 0, said
    assert digests(out) == found
    code, said = run("--texts", texts, "--out", tmp_path / "other", "--seed", 4,
                     "--per-text", 2)
    assert code == 0 and digests(tmp_path / "other") != found


def test_holdout_writes_the_split_and_the_speech_task_reads_its_groups(texts, tmp_path):
    from stages.ingest import walk
    from stages.lib.params import defaults
    from stages.tasks.speech import TASK

    out = tmp_path / "held"
    code, said = run("--texts", texts, "--out", out, "--holdout", "festival", "--group",
                     "synth", "--per-text", 2)
    assert code == 0, said
    assert "(held out: test)" in said and not (out / "validated.tsv").exists()
    assert {r["synth"] for r in rows(out / "test.tsv")} == {"festival"}
    assert {r["synth"] for r in rows(out / "train.tsv")} == {"espeak"}
    found = TASK.read_annotations(out, walk(out), TASK.read_settings(defaults()))
    assert not found.errors and len(found.values) == 6
    assert {(v["group"], v["split"]) for v in found.values.values()} == {
        ("festival", "test"), ("espeak", "train")}


@pytest.mark.parametrize("args, message", [
    (["--synths", "espeak,flite"], "--synths espeak,flite: give some of espeak, festival"),
    (["--voices", "nobody"], "--voices nobody: no such voice"),
    (["--synths", "espeak", "--voices", "m3,kal_diphone"], "--voices kal_diphone: no such"),
    (["--voices", "m3"], "--voices names no voice of festival"),
    (["--holdout", "festival", "--holdout", "espeak"], "leaves train.tsv empty"),
    (["--holdout", "festival:nobody"], "--holdout festival:nobody: not one of"),
])
def test_bad_options_are_errors_naming_them(texts, tmp_path, args, message):
    code, said = run("--texts", texts, "--out", tmp_path / "x", *args)
    assert code == 2 and message in said, said
    assert not (tmp_path / "x").exists()


def test_bad_texts_and_a_foreign_out_are_refused(texts, tmp_path):
    code, said = run("--texts", tmp_path / "none.txt", "--out", tmp_path / "x")
    assert code == 2 and "--texts" in said and "no such file" in said
    (tmp_path / "tab.txt").write_text("one\ttwo\n", encoding="utf-8")
    code, said = run("--texts", tmp_path / "tab.txt", "--out", tmp_path / "x")
    assert code == 2 and "line 1 holds a tab" in said
    (tmp_path / "latin.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    code, said = run("--texts", tmp_path / "latin.txt", "--out", tmp_path / "x")
    assert code == 2 and "not UTF-8" in said
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine", encoding="utf-8")
    code, said = run("--texts", texts, "--out", mine)
    assert code == 2 and "was not written by synth_speech" in said
    assert (mine / "keep.txt").read_text(encoding="utf-8") == "mine"


def test_without_festival_the_error_names_the_packages(texts, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no festival program on it
    code, said = run("--texts", texts, "--out", tmp_path / "x")
    assert code == 2
    assert ("apt-get install -y festival festvox-kallpc16k festvox-kdlpc16k "
            "festvox-us-slt-hts") in said
    code, said = run("--texts", texts, "--out", tmp_path / "y", "--synths", "espeak")
    assert code == 0, said  # espeak-ng alone needs no system package
