"""bench/speech_mix.py: a keyword project on espeak-ng and Festival, set up as a user of
tools.synth_speech would, in the layout the keyword task reads, with the speech sample's
held-out espeak-ng voices as its given test split (a small one: 4 clips a word). The whole
bench (dvc repro and bench/speech_peer.py --other flite) is in docs/benchmarks.md."""
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT


pytestmark = pytest.mark.usefixtures("festival_installed")


def test_a_keyword_project_on_two_synthesizers_holds_the_sample_test_voices_out(tmp_path):
    from stages.tasks.audio.sample import WORDS
    from stages.tasks.speech.sample import HELD_OUT

    root = tmp_path / "mix"
    proc = subprocess.run([sys.executable, "-m", "bench.speech_mix", "--task", "audio",
                           "--dir", str(root), "--per-word", "4"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    clips = sorted(p.relative_to(root / "data/kw").as_posix()
                   for p in (root / "data/kw").rglob("*.wav"))
    assert len(clips) == 4 * len(WORDS) and {c.split("/")[0] for c in clips} == set(WORDS)
    speakers = {c.split("/")[1].split("_nohash_")[0] for c in clips}
    assert {s.split("-")[0] for s in speakers} == {"espeak", "festival"}
    assert sum(s.startswith("festival-") for s in speakers) == 3  # its three voices
    test = (root / "data/kw/testing_list.txt").read_text().split()
    held = {f"espeak-{v}" for v in HELD_OUT["test"]}
    assert test and set(test) <= set(clips)
    assert {t.split("/")[1].split("_nohash_")[0] for t in test} <= held
    assert not [c for c in clips if c not in test
                and c.split("/")[1].split("_nohash_")[0] in held]  # every held clip in test
    assert not (root / "data/kw-cv").exists()
    params = yaml.safe_load((root / "params.yaml").read_text())
    assert params["task"] == "audio" and params["data"]["source"] == "data/kw"
    assert params["split"]["by"] == "given"
    log = subprocess.run(["git", "log", "-1", "--format=%s"], cwd=root, capture_output=True,
                         text=True).stdout
    assert "espeak-ng and Festival" in log
    again = subprocess.run([sys.executable, "-m", "bench.speech_mix", "--task", "audio",
                            "--dir", str(root)], cwd=ROOT, capture_output=True, text=True)
    assert again.returncode != 0 and "exists" in again.stderr  # never over a folder


def test_speech_texts_are_seeded_digit_strings():
    from bench.speech_mix import texts
    from stages.tasks.speech.sample import WORDS

    a = texts("speech", 50, 551)
    assert a == texts("speech", 50, 551) and a != texts("speech", 50, 552)
    assert all(2 <= len(t.split()) <= 6 and set(t.split()) <= set(WORDS) for t in a)


def test_speech_val_is_the_sample_val_voices_so_festival_stays_in_train(tmp_path):
    """speech: the speech sample's val voices move from train.tsv to dev.tsv (the speech task
    reads dev.tsv as the given val split), every other row stays, in order."""
    from bench.speech_mix import given_val
    from stages.tasks.speech.annotations import read_annotations
    from stages.tasks.speech.sample import HELD_OUT

    head = "client_id\tpath\tsentence\tsynth\tvoice"
    voices = ["espeak:m3", f"espeak:{HELD_OUT['val'][0]}", "festival:kal_diphone",
              f"espeak:{HELD_OUT['val'][1]}", "festival:ked_diphone"]
    rows = [f"{v}\t{k:06d}.wav\tone two\t{v.split(':')[0]}\t{v.split(':')[1]}"
            for k, v in enumerate(voices)]
    (tmp_path / "train.tsv").write_text("\n".join([head, *rows]) + "\n", encoding="utf-8")
    (tmp_path / "test.tsv").write_text(f"{head}\nespeak:m1\t000009.wav\tsix\tespeak\tm1\n")
    (tmp_path / "clips").mkdir()
    for k in (*range(5), 9):
        (tmp_path / "clips" / f"{k:06d}.wav").write_bytes(b"")
    assert given_val(tmp_path, HELD_OUT["val"]) == 2
    assert (tmp_path / "train.tsv").read_text().splitlines() == [head, *rows[0:1], rows[2],
                                                                 rows[4]]
    assert (tmp_path / "dev.tsv").read_text().splitlines() == [head, rows[1], rows[3]]
    assert not list(tmp_path.glob(".*.part"))
    listing = [(p.relative_to(tmp_path).as_posix(), "file", 0)
               for p in sorted(tmp_path.rglob("*")) if p.is_file()]
    found = read_annotations(tmp_path, listing).values
    assert {k: found[f"clips/{k:06d}.wav"]["split"] for k in (*range(5), 9)} == {
        0: "train", 1: "val", 2: "train", 3: "val", 4: "train", 9: "test"}
