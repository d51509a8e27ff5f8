"""The speech layouts (stages/tasks/speech/annotations.py) on real small trees of WAV and FLAC
files: a `path<TAB>transcript` list, LibriSpeech's *.trans.txt, Common Voice's TSVs; the speaker
becomes the group, a dataset's own split is kept, and every annotation problem is named."""
import wave

import numpy as np
import pytest

from stages.ingest import walk
from stages.tasks.speech.annotations import read_annotations

RATE = 16000


def write_clip(path, seconds=0.5, freq=440.0):
    """A real audio file: 16-bit mono WAV (stdlib) or FLAC (soundfile), a sine tone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(RATE * seconds)) / RATE
    samples = (0.3 * np.sin(2 * np.pi * freq * t) * 32767).astype("<i2")
    if path.suffix == ".flac":
        import soundfile

        soundfile.write(path, samples, RATE, format="FLAC", subtype="PCM_16")
        return
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(samples.tobytes())


def read(source):
    return read_annotations(source, walk(source))


def test_list_layout_with_optional_speaker(tmp_path):
    for name in ("a.wav", "sub/b.wav", "c.wav", "stray.wav"):
        write_clip(tmp_path / name)
    (tmp_path / "transcripts.txt").write_text(
        "a.wav\tone two\n./sub/b.wav\tthree\tspk7\nc.wav\tfour\nc.wav\tfive\n"
        "gone.wav\tsix\nno tab here\n", encoding="utf-8")
    found = read(tmp_path)
    assert found.values["a.wav"]["text"] == "one two" and found.values["a.wav"]["group"] == ""
    assert found.values["sub/b.wav"]["text"] == "three"
    assert found.values["sub/b.wav"]["group"] == "spk7"
    assert found.values["c.wav"]["text"] == "four"  # the first entry counts
    assert found.errors["c.wav"][0] == "duplicate_entry" and "line 4" in found.errors["c.wav"][1]
    assert found.errors["stray.wav"][0] == "unlabelled"
    assert found.errors["gone.wav"][0] == "missing" and "gone.wav" in found.extra
    assert found.errors["transcripts.txt"] == (
        "bad_list", "transcripts.txt: line 6 is not path<TAB>transcript[<TAB>speaker]")
    assert "transcripts.txt" in found.skip and "a.wav" not in found.errors
    assert len(found.values["a.wav"]["text_sha256"]) == 64


def test_librispeech_speaker_is_the_group_and_folders_give_the_split(tmp_path):
    root = tmp_path / "LibriSpeech"
    tree = {"train-clean-100/19/198": ["19-198-0000", "19-198-0001"],
            "dev-clean/84/121": ["84-121-0000"],
            "test-other/1688/142": ["1688-142-0000"]}
    for folder, ids in tree.items():
        for key in ids:
            write_clip(root / folder / f"{key}.flac")
        chapter = folder.rsplit("/", 1)[-1]
        speaker = folder.split("/")[1]
        (root / folder / f"{speaker}-{chapter}.trans.txt").write_text(
            "".join(f"{key} HELLO WORLD {n}\n" for n, key in enumerate(ids)))
    (root / "dev-clean/84/121/84-121-0009.flac").unlink(missing_ok=True)
    with (root / "dev-clean/84/121/84-121.trans.txt").open("a") as f:
        f.write("84-121-0009 NOT RECORDED\n")
    found = read(root)
    row = found.values["train-clean-100/19/198/19-198-0001.flac"]
    assert (row["text"], row["group"], row["split"]) == ("HELLO WORLD 1", "19", "train")
    assert found.values["dev-clean/84/121/84-121-0000.flac"]["split"] == "val"
    assert found.values["dev-clean/84/121/84-121-0000.flac"]["group"] == "84"
    assert found.values["test-other/1688/142/1688-142-0000.flac"]["split"] == "test"
    assert found.errors["dev-clean/84/121/84-121-0009.flac"][0] == "missing"
    assert all(r.endswith(".trans.txt") for r in found.skip)
    assert not {k for k, (kind, _) in found.errors.items() if kind != "missing"}


def test_common_voice_given_split_client_is_the_group(tmp_path):
    header = "client_id\tpath\tsentence_id\tsentence\tup_votes\tdown_votes\n"
    lists = {"train.tsv": [("c1", "a.wav", "Hello there."), ("c1", "b.wav", "Good \"day\"")],
             "dev.tsv": [("c2", "c.wav", "Bye")], "test.tsv": [("c3", "d.wav", "Yes")],
             "validated.tsv": [("c1", "a.wav", "Hello there."), ("c4", "e.wav", "Up")],
             "invalidated.tsv": [("c5", "bad.wav", "noise")]}
    for name, entries in lists.items():
        (tmp_path / name).write_text(header + "".join(
            f"{c}\t{p}\tx{n}\t{s}\t2\t0\n" for n, (c, p, s) in enumerate(entries)))
        for _, p, _ in entries:
            write_clip(tmp_path / "clips" / p)
    found = read(tmp_path)
    a = found.values["clips/a.wav"]
    assert (a["text"], a["group"], a["split"]) == ("Hello there.", "c1", "train")
    assert found.values["clips/b.wav"]["text"] == 'Good "day"'  # quotes kept as written
    assert found.values["clips/c.wav"]["split"] == "val"
    assert found.values["clips/d.wav"]["split"] == "test"
    # validated.tsv is the union the split lists are drawn from: not read beside them; a clip
    # only the other lists name is left out, with a warning
    assert {"clips/e.wav", "clips/bad.wav"} <= found.skip
    assert [name for name, _ in found.warnings] == ["left_out"]
    assert "2 clip(s)" in found.warnings[0][1]
    assert not found.errors


def test_common_voice_validated_alone_has_no_split(tmp_path):
    (tmp_path / "validated.tsv").write_text("client_id\tpath\tsentence\nspk\ta.wav\tHi\n")
    write_clip(tmp_path / "a.wav")
    found = read(tmp_path)
    assert found.values["a.wav"]["split"] == "" and found.values["a.wav"]["group"] == "spk"


def test_common_voice_header_without_its_columns_is_a_bad_list(tmp_path):
    (tmp_path / "train.tsv").write_text("file\ttext\na.wav\thi\n")
    write_clip(tmp_path / "a.wav")
    found = read(tmp_path)
    assert found.errors["train.tsv"][0] == "bad_list"
    assert "path, sentence, client_id" in found.errors["train.tsv"][1]
    assert found.errors["a.wav"][0] == "unlabelled"


@pytest.mark.parametrize("data, message", [
    (b"\xff\xfea\x00", "UTF-16"),
    (b"a.wav\tok\nb.wav\t\xff\xfe\n", "not UTF-8 on 1 line(s): 2"),
])
def test_a_list_in_another_encoding_is_named(tmp_path, data, message):
    write_clip(tmp_path / "a.wav")
    (tmp_path / "transcripts.txt").write_bytes(data)
    found = read(tmp_path)
    assert found.errors["transcripts.txt"][0] == "bad_list"
    assert message in found.errors["transcripts.txt"][1]


def test_no_list_at_all_leaves_every_clip_unlabelled_naming_the_layouts(tmp_path):
    write_clip(tmp_path / "a.wav")
    found = read(tmp_path)
    kind, message = found.errors["a.wav"]
    assert kind == "unlabelled" and "transcripts.txt" in message and "trans.txt" in message


@pytest.mark.parametrize("layout", ["librispeech", "common_voice"])
def test_init_reads_the_layout_keeps_its_split_and_fits_the_features(tmp_path, layout):
    """`tools.init --task speech --source DIR` names the layout, keeps the dataset's own split
    (split.by given), and fits frames to the longest clip of any split (the gate checks the
    test clips too); the data is not touched."""
    import yaml

    from tests.conftest import ROOT, run_tool
    from tools.project import copy_project

    project = copy_project(ROOT, tmp_path / "project")
    data = project / "data/mine"
    if layout == "librispeech":
        for split, seconds in (("train-clean-5", 1.3), ("dev-clean-2", 0.5),
                               ("test-clean", 0.5)):
            folder = data / split / "7" / "11"
            for k in range(3):
                write_clip(folder / f"7-11-000{k}.flac", seconds=seconds - 0.2 * k)
            (folder / "7-11.trans.txt").write_text(
                "".join(f"7-11-000{k} HELLO {k}\n" for k in range(3)))
        found = "LibriSpeech *.trans.txt"
    else:
        for split in ("train", "dev", "test"):
            (data / f"{split}.tsv").parent.mkdir(parents=True, exist_ok=True)
            (data / f"{split}.tsv").write_text("client_id\tpath\tsentence\n" + "".join(
                f"{split}{k % 2}\t{split}{k}.wav\tsay {k}\n" for k in range(3)))
            for k in range(3):
                write_clip(data / "clips" / f"{split}{k}.wav",
                           seconds=1.3 if split == "test" and k == 1 else 0.4)
        found = "Common Voice TSVs"
    before = {p: p.read_bytes() for p in data.rglob("*") if p.is_file()}
    proc = run_tool("init", "--task", "speech", "--source", "data/mine", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"found: {found}" in proc.stdout, proc.stdout
    assert "its own train/val/test split" in proc.stdout and "speakers" in proc.stdout
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert params["task"] == "speech" and params["split"]["by"] == "given"
    assert params["prepare"]["audio"]["frames"] == 131  # 1.3 s at hop 160, 16 kHz
    assert "image_size" not in params["prepare"]
    assert params["validate"]["max_seconds"] == 1.3
    assert params["train"]["model"] == "cnn_bigru"
    assert {p: p.read_bytes() for p in data.rglob("*") if p.is_file()} == before


def test_init_fits_the_longest_of_every_clip_not_of_a_spread_of_them(tmp_path):
    """An audio fit is a bound the gate enforces on each clip, so init reads every clip's
    header (FIT_HEADERS 0): among 2,500 clips, the one long clip is found at an index an even
    spread of 2,000 would skip; an image fit still reads a spread of at most 2,000."""
    from types import SimpleNamespace

    from stages.lib import modality
    from stages.tasks.speech import Speech
    from tools.init import headers

    rows = [{"path": f"{k:04d}.wav", "split": "train" if k % 5 else "test"}
            for k in range(2500)]
    for r in rows:
        write_clip(tmp_path / r["path"], seconds=0.02)
    write_clip(tmp_path / "1999.wav", seconds=1.25)  # a test clip, at an odd index
    facts, bad = headers(tmp_path, rows, modality.get("audio"))
    assert len(facts) == 2500 and not bad
    fitted = dict((k, v) for k, v, _ in Speech().fit_prepare(facts))
    assert fitted["validate.max_seconds"] == 1.3 and fitted["prepare.audio"]["frames"] == 131
    assert modality.get("image").FIT_HEADERS == 2000
    spread = SimpleNamespace(FIT_HEADERS=2000, header=modality.get("audio").header)
    facts, _ = headers(tmp_path, rows, spread)  # what init read before: every other clip
    assert len(facts) == 1250
    assert max(f for _, f, _, _ in facts) < 16000


def test_smoke_subset_cuts_every_layout_to_the_chosen_clips(tmp_path):
    """Task.subset_annotations (tools.smoke): the subset's lists name the chosen clips only,
    and it reads as its source does (transcripts, speakers, split)."""
    import shutil

    from stages.tasks.speech.annotations import write_subset

    trees = {"list": {"transcripts.txt": "a.wav\tone\tx\nb.wav\ttwo\ty\nc.wav\tthree\n"},
             "cv": {"train.tsv": "client_id\tpath\tsentence\nx\ta.wav\tone\ny\tb.wav\ttwo\n",
                    "test.tsv": "client_id\tpath\tsentence\nz\tc.wav\tthree\n",
                    "other.tsv": "client_id\tpath\tsentence\nw\td.wav\tfour\n"},
             "libri": {"train-x/1/2/1-2.trans.txt": "1-2-0 ONE\n1-2-1 TWO\n",
                       "test-y/3/4/3-4.trans.txt": "3-4-0 THREE\n"}}
    audio = {"list": ["a.wav", "b.wav", "c.wav"],
             "cv": ["clips/a.wav", "clips/b.wav", "clips/c.wav", "clips/d.wav"],
             "libri": ["train-x/1/2/1-2-0.flac", "train-x/1/2/1-2-1.flac",
                       "test-y/3/4/3-4-0.flac"]}
    for name, files in trees.items():
        source, dest = tmp_path / name, tmp_path / f"{name}-subset"
        for rel, text in files.items():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            (source / rel).write_text(text)
        for rel in audio[name]:
            write_clip(source / rel)
        found = read(source)
        chosen = {audio[name][1], audio[name][2]}
        dest.mkdir()
        for rel in chosen:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / rel, dest / rel)
        write_subset(source, dest, found, chosen)
        sub = read(dest)
        assert not sub.errors, (name, sub.errors)
        assert {r: v for r, v in sub.values.items() if r in chosen} == {
            r: found.values[r] for r in chosen}, name
        assert audio[name][0] not in sub.values
