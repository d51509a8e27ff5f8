"""A speech or keyword project trained on two synthesizers, espeak-ng and Festival, as a user of
tools.synth_speech would set it up, so that bench/speech_peer.py can measure it on a third
that nothing here trains on (`--other flite`, bench/flite_synth.py). The built-in samples
speak with both too, Festival in a smaller share (speech: 564 of 1,400 train clips); this
project has half its clips of each, and speech 3,000 clips in all.

`--dir DIR` clones this repository into DIR and writes there:
- `texts.txt`: speech, TEXTS strings of 2 to 6 of the sample's digits (seeded); audio, the
  sample's 20 keywords, each spoken PER_WORD times;
- the clips, by `tools.synth_speech --synths espeak,festival` (each synthesizer every other
  clip, every English voice of each), the speech sample's 8 held-out espeak-ng test voices
  (stages/tasks/speech/sample.py HELD_OUT) as the given test split (`--holdout`):
  speech, `data/mix/` in Common Voice's layout, the speech sample's 4 val voices' clips moved
  from train.tsv to dev.tsv (the given val split: carved from train by voice, val took one of
  Festival's three voices out of training); audio, `data/kw/` in Speech Commands' layout (a
  folder a word, `SYNTH-VOICE_nohash_N.wav`, testing_list.txt), the layout the keyword task
  reads (its val, carved by a hash of the voice, kept Festival's three voices in train);
- params.yaml by `tools.init --task speech|audio --source ...` (the task's recipe, the data's
  own split kept, val carved from train by voice), committed.

    python -m bench.speech_mix --task speech --dir /tmp/mix-speech
    cd /tmp/mix-speech && dvc repro
    python -m bench.speech_peer --run /tmp/mix-speech --clips 120 --other flite
"""
import csv
import shutil
import subprocess
import sys
from pathlib import Path

import click

TEXTS = 3000  # speech: clips, one a text (1,500 a synthesizer)
PER_WORD = 80  # audio: clips a keyword (1,600 in all)


def run(*cmd, cwd=None):
    click.echo("$ " + " ".join(map(str, cmd)), err=True)
    subprocess.run([str(c) for c in cmd], cwd=cwd, check=True)


def texts(task: str, n: int, seed: int) -> list[str]:
    """The texts to speak: digit strings (speech) or the keywords (audio)."""
    import numpy as np

    if task == "audio":
        from stages.tasks.audio.sample import WORDS

        return list(WORDS)
    from stages.tasks.speech.sample import DIGITS, WORDS

    rng = np.random.Generator(np.random.PCG64(seed))
    return [" ".join(WORDS[d] for d in rng.integers(0, 10, int(rng.integers(DIGITS[0],
                                                                            DIGITS[1] + 1))))
            for _ in range(n)]


def given_val(cv: Path, voices) -> int:
    """Move the rows of espeak-ng's `voices` from cv/train.tsv to cv/dev.tsv (written whole
    through temp files); the number moved."""
    import os

    head, *rows = (cv / "train.tsv").read_text(encoding="utf-8").splitlines()
    val = {f"espeak:{v}" for v in voices}
    dev = [r for r in rows if r.split("\t", 1)[0] in val]
    train = [r for r in rows if r.split("\t", 1)[0] not in val]
    for name, kept in (("dev.tsv", dev), ("train.tsv", train)):
        tmp = cv / f".{name}.part"
        tmp.write_text("".join(f"{r}\n" for r in (head, *kept)), encoding="utf-8")
        os.replace(tmp, cv / name)
    return len(dev)


def speech_commands(cv: Path, out: Path) -> int:
    """Copy synth_speech's Common Voice folder into Speech Commands' layout: out/WORD/
    SYNTH-VOICE_nohash_N.wav (the voice is the speaker, so the split's group) and
    testing_list.txt naming test.tsv's clips; the number of test clips."""
    test = []
    for name in ("train.tsv", "test.tsv"):
        with open(cv / name, encoding="utf-8", newline="") as f:
            for r in csv.DictReader(f, delimiter="\t"):
                rel = f"{r['sentence']}/{r['synth']}-{r['voice']}_nohash_{r['path'][:-4]}.wav"
                (out / r["sentence"]).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(cv / "clips" / r["path"], out / rel)
                if name == "test.tsv":
                    test.append(rel)
    (out / "testing_list.txt").write_text("".join(f"{t}\n" for t in sorted(test)))
    return len(test)


@click.command()
@click.option("--task", type=click.Choice(["speech", "audio"]), required=True,
              help="speech: digit strings (CTC); audio: the 20 keywords.")
@click.option("--dir", "root", required=True, type=click.Path(path_type=Path),
              help="A new folder: the project to set up.")
@click.option("--texts", "n", default=TEXTS, show_default=True, type=click.IntRange(2),
              help="speech: digit strings to speak, one clip each.")
@click.option("--per-word", default=PER_WORD, show_default=True, type=click.IntRange(1),
              help="audio: clips a keyword.")
@click.option("--seed", default=551, show_default=True,
              help="speech: the digit strings' draw (the clips' draws are synth_speech's, "
                   "its default seed).")
def main(task, root, n, per_word, seed):
    """Clone the repository into DIR with clips of espeak-ng and Festival and params for them."""
    from stages.tasks.speech.sample import HELD_OUT

    if root.exists():
        raise click.ClickException(f"--dir {root} exists: give a new folder")
    repo = Path(__file__).resolve().parents[1]
    run("git", "clone", "-q", repo, root)
    (root / "texts.txt").write_text("\n".join(texts(task, n, seed)) + "\n", encoding="utf-8")
    holdout = [a for v in HELD_OUT["test"] for a in ("--holdout", f"espeak:{v}")]
    cv = root / ("data/mix" if task == "speech" else "data/kw-cv")
    run(sys.executable, "-m", "tools.synth_speech", "--texts", "texts.txt", "--out",
        cv.relative_to(root), "--synths", "espeak,festival",
        "--per-text", 1 if task == "speech" else per_word, *holdout, cwd=root)
    source = "data/mix"
    if task == "speech":
        click.echo(f"{given_val(cv, HELD_OUT['val'])} val clips", err=True)
    if task == "audio":
        source = "data/kw"
        click.echo(f"{speech_commands(cv, root / source)} test clips", err=True)
        shutil.rmtree(cv)
    run(sys.executable, "-m", "tools.init", "--task", task, "--source", source, cwd=root)
    run("git", "add", "params.yaml", "dvc.yaml", cwd=root)
    run("git", "commit", "-qm", f"{task} on espeak-ng and Festival (bench/speech_mix.py)",
        cwd=root)


if __name__ == "__main__":
    main()
