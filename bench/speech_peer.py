"""The pipeline's speech (or keyword) model against PocketSphinx on the same clips: the run's own
test split (the sample's held-out espeak-ng voices) and clips of a synthesizer the run never
trained on, with the sample's vocabulary: CMU Flite's four voices (`--other flite`, the
default, bench/flite_synth.py), which nothing in the project trains on, or Festival's three
English voices (`--other festival`, written by tools.synth_speech's renderer): the built-in
samples train on Festival too, so it measures only a run trained on espeak-ng alone.

PocketSphinx: Debian's `pocketsphinx` 0.8+5prealpha (`pocketsphinx_batch`, the `en-us` model
of `pocketsphinx-en-us`, cmudict), with a JSGF grammar of the task's words (speech: one or more
digits; audio: exactly one of the 20 keywords). Ours: the run's models/model.onnx through
onnxruntime (tools.inference, as predict: the modality's read, its decoding, within the
lexicon when the model has one), one clip at a time. Reported per set: CER, WER, line
accuracy (speech) or top-1 (audio), and CPU seconds per clip (ours: this process's CPU
around read + inference; PocketSphinx: its process's CPU, model loading included, over the
clips).

    python -m bench.speech_peer --run /tmp/speech-run [--clips 240] [--seed 55] [--other festival]
"""
import os
import re
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import click

SPHINX = "/usr/share/pocketsphinx/model/en-us"
HYP = re.compile(r"^(.*?)\s*\((\S+)(?: -?\d+)?\)\s*$")


def grammar(task: str, words) -> str:
    """A JSGF grammar: one or more of the words (speech), or exactly one (audio)."""
    rule = "<word>+" if task == "speech" else "<word>"
    return (f"#JSGF V1.0;\ngrammar peer;\npublic <line> = {rule};\n"
            f"<word> = {' | '.join(words)};\n")


def sphinx(clips, task: str, words, work: Path) -> tuple[list[str], float]:
    """PocketSphinx's text of each (wav path, truth) and its CPU seconds per clip."""
    if not os.path.exists("/usr/bin/pocketsphinx_batch") or not os.path.isdir(SPHINX):
        raise click.ClickException("PocketSphinx is not installed: apt-get install -y "
                                   "pocketsphinx pocketsphinx-en-us")
    links = work / "sphinx"
    links.mkdir()
    for k, (path, _) in enumerate(clips):
        os.symlink(os.path.abspath(path), links / f"{k:06d}.wav")
    (work / "ctl").write_text("".join(f"{k:06d}\n" for k in range(len(clips))))
    (work / "peer.gram").write_text(grammar(task, words))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(["pocketsphinx_batch", "-adcin", "yes", "-adchdr", "44", "-cepdir",
                    str(links), "-cepext", ".wav", "-ctl", str(work / "ctl"), "-hyp",
                    str(work / "hyp"), "-jsgf", str(work / "peer.gram"), "-hmm",
                    f"{SPHINX}/en-us", "-dict", f"{SPHINX}/cmudict-en-us.dict", "-logfn",
                    os.devnull], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    said = {}
    for line in (work / "hyp").read_text().splitlines():
        m = HYP.match(line)
        if m:
            said[m[2]] = m[1].strip()
    return [said.get(f"{k:06d}", "") for k in range(len(clips))], cpu / len(clips)


def ours(clips, run: Path, views: bool = True) -> tuple[list[str], list[float], float]:
    """Our model's text (speech) or label (audio) of each clip, its confidence, and the CPU
    seconds per clip (read + features + inference, batch 1, one thread); views: with its task's
    test-time views, as predict answers (False: the clip alone)."""
    from tools.inference import load, predict_batch

    model = load("onnxruntime", run / "models/model.onnx", threads=1)
    texts, conf, cpu = [], [], 0.0
    for path, _ in clips:
        start = time.process_time()
        x = model.modality.read(path, model.spec)
        [pred] = predict_batch(model, [x], 1, views)
        cpu += time.process_time() - start
        texts.append(pred.get("text", pred.get("label", "")))
        conf.append(float(pred.get("confidence", pred.get("score", 0.0))))
    return texts, conf, cpu / len(clips)


def held_out_espeak(run: Path, task: str) -> list:
    """(wav path, truth) of the run's test split."""
    from stages.lib.io import read_csv
    from stages.lib.params import load as load_params

    source = Path(load_params("data", str(run / "params.yaml")).source)
    source = source if source.is_absolute() else run / source
    key = "text" if task == "speech" else "label"
    return [(str(source / r["path"]), r[key]) for r in read_csv(run / "data/split/test.csv")]


OTHERS = ("festival", "flite")  # --other: Festival (tools.synth_speech's second), Flite (bench)


def other_voices(other: str) -> list[str]:
    if other == "flite":
        from bench.flite_synth import VOICES

        return list(VOICES)
    from stages.tasks.common import festival_synth

    return festival_synth.voices()


def other_clips(task: str, n: int, seed: int, out: Path, other: str = "festival") -> list:
    """n clips of the other synthesizer's voices in turn: speech, strings of 2 to 5 of the
    sample's digits (6 slow ones by Festival's HTS voice run past the sample model's 3.2 s);
    audio, its 20 keywords in turn."""
    import numpy as np

    from stages.tasks.speech import synth

    pool = {other: other_voices(other)}
    if task == "speech":
        from stages.tasks.speech.sample import WORDS

        texts = []
        for i in range(n):
            rng = np.random.Generator(np.random.PCG64([seed, 1, i]))
            size = int(rng.integers(2, 6))
            texts.append(" ".join(WORDS[d] for d in rng.integers(0, 10, size)))
    else:
        from stages.tasks.audio.sample import WORDS

        texts = [WORDS[i % len(WORDS)] for i in range(n)]
    plans = []
    for i, text in enumerate(texts):
        p = synth.plan(i, text, pool, seed)
        p["voice"] = pool[other][voice_index(task, i, len(pool[other]))]
        plans.append(p)
    if other == "flite":
        from bench import flite_synth

        flite_synth.write(out, plans, workers=2)
    else:
        synth.write(out, plans, workers=2)
    return [(str(out / "clips" / f"{i:06d}.wav"), t) for i, t in enumerate(texts)]


def voice_index(task: str, i: int, voices: int) -> int:
    """The voice of clip i: each in turn; for audio, whose clip i says keyword i mod 20, moved on
    by one every 20 clips, so that every voice says every keyword (in 4 x 20 clips) and a
    voice's figure is not a few keywords'."""
    if task == "audio":
        from stages.tasks.audio.sample import WORDS

        i += i // len(WORDS)
    return i % voices


def score(task: str, truths, preds) -> dict:
    if task == "audio":
        import numpy as np

        return {"top1": float(np.mean([t == p for t, p in zip(truths, preds, strict=True)]))}
    from stages.tasks.common.ctc import scores

    s = scores(truths, preds)
    return {k: s[k] for k in ("cer", "wer", "line_accuracy")}


def line(name: str, who: str, s: dict, cpu: float, extra: str = "") -> str:
    figures = "  ".join(f"{k} {v:.4f}" for k, v in s.items())
    return f"{name:28s} {who:12s} {figures}  cpu/clip {cpu * 1000:.1f} ms{extra}"


def run_options(what: str, clips: int):
    """The click options both speech benches take: --run (a finished run: `what`), --clips
    (default `clips`), --seed and --other."""
    def add(f):
        for option in reversed((
                click.option("--run", "run_dir", default=".", show_default=True,
                             type=click.Path(exists=True, file_okay=False, path_type=Path),
                             help=f"Root of a finished `dvc repro` of {what}."),
                click.option("--clips", default=clips, show_default=True,
                             type=click.IntRange(3, 100_000),
                             help="Clips of the other synthesizer to synthesize (its voices in "
                                  "turn)."),
                click.option("--seed", default=55, show_default=True,
                             help="The other synthesizer's draws."),
                click.option("--other", type=click.Choice(OTHERS), default="flite",
                             show_default=True,
                             help="The synthesizer of the second set: flite (CMU Flite's awb, "
                                  "rms, slt and kal16, which nothing in the project trains on) "
                                  "or festival (its 3 English voices, which the built-in "
                                  "samples train on: for a run of your own on espeak-ng "
                                  "alone)."))):
            f = option(f)
        return f
    return add


@click.command()
@run_options("task speech or audio (its model.onnx, test split and data.source)", 240)
@click.option("--views/--no-views", default=True, show_default=True,
              help="Our model with its task's test-time views, as predict and serve answer "
                   "(docs/speech.md#test-time-views), or on the clip alone.")
def main(run_dir, clips, seed, other, views):
    """Print ours vs PocketSphinx on the run's test split and on another synthesizer."""
    from stages.tasks import current
    from stages.tasks.common.ctc import auroc

    run = run_dir.resolve()
    task = current(str(run / "params.yaml")).name
    if task not in ("speech", "audio"):
        raise click.UsageError(f"{run}/params.yaml: task {task}; give a speech or audio run")
    if task == "speech":
        from stages.tasks.speech.sample import WORDS
    else:
        from stages.tasks.audio.sample import WORDS
    with tempfile.TemporaryDirectory(prefix="speech-peer-") as tmp:
        sets = {"the run's test split": held_out_espeak(run, task),
                f"{other} voices": other_clips(task, clips, seed, Path(tmp) / other, other)}
        for name, items in sets.items():
            truths = [t for _, t in items]
            work = Path(tmp) / re.sub(r"\W+", "-", name)
            work.mkdir()
            texts, conf, cpu = ours(items, run, views)
            right = [t == p for t, p in zip(truths, texts, strict=True)]
            mean = {ok: sum(c for c, r in zip(conf, right, strict=True) if r == ok)
                    / max(1, sum(r == ok for r in right)) for ok in (True, False)}
            ranked = auroc(conf, right)  # of line correctness (None: all right or all wrong)
            click.echo(line(f"{name} ({len(items)})", "ours", score(task, truths, texts),
                            cpu, f"  confidence right {mean[True]:.3f} wrong "
                                 f"{mean[False]:.3f} auroc "
                                 f"{'-' if ranked is None else f'{ranked:.3f}'}"))
            said, cpu = sphinx(items, task, WORDS, work)
            click.echo(line(f"{name} ({len(items)})", "PocketSphinx",
                            score(task, truths, said), cpu))
            if name.startswith(other):
                per_voice(task, truths, texts, said, other_voices(other))


def per_voice(task: str, truths, texts, said, voices) -> None:
    """The other synthesizer's figures per voice (clip i speaks voice_index's voice)."""
    of = [voice_index(task, i, len(voices)) for i in range(len(truths))]
    for k, voice in enumerate(voices):
        pick = [i for i, v in enumerate(of) if v == k]
        truth = [truths[i] for i in pick]
        a, b = (score(task, truth, [xs[i] for i in pick]) for xs in (texts, said))
        click.echo(f"  {voice:24s} ours {next(iter(a.values())):.4f}  PocketSphinx "
                   f"{next(iter(b.values())):.4f}  ({next(iter(a))})")


if __name__ == "__main__":
    main()
