"""Synthetic speech from your texts, in the layout `data.source` reads for `task: speech`: the
Common Voice layout, `clips/` and a list (client_id, path, sentence, synth, voice), every text
spoken by espeak-ng's and Festival's English voices in turn. Seeded and deterministic; each
clip's synthesizer and voice are in the list, and its group (client_id) is its voice or, with
--group synth, its synthesizer, so a split keeps them whole; `--holdout festival` writes the
split itself (train.tsv, test.tsv: `split.by: given`) with that synthesizer's clips in test.
The renderer: stages/tasks/speech/synth.py; docs/speech.md.

    python -m tools.synth_speech --texts texts.txt --out data/speech --synths espeak,festival
"""
import sys
from pathlib import Path

import click


@click.command()
@click.option("--texts", required=True, type=click.Path(path_type=Path),
              help="UTF-8 file, one text a line (blank lines skipped, no tabs).")
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="A new folder to write, or one synth_speech wrote before (it holds its "
                   ".synth_speech marker), replaced whole; any other existing path is refused.")
@click.option("--synths", default="espeak,festival", show_default=True,
              help="Comma-separated synthesizers: espeak (the espeakng-loader wheel) and "
                   "festival (Debian's festival and festvox-* voices); clip i uses the i-th in "
                   "turn.")
@click.option("--voices", default="",
              help="Comma-separated voices to use, `synth:voice` or a voice name (espeak-ng's "
                   "variants such as m3, f2; Festival's kal_diphone, ked_diphone, "
                   "cmu_us_slt_arctic_hts). Default: every English voice of each synthesizer.")
@click.option("--per-text", default=1, show_default=True, type=click.IntRange(1, 1000),
              help="Clips per text (each with its own draw of synthesizer, voice, rate, "
                   "pitch, gain, noise and echo).")
@click.option("--seed", default=0, show_default=True, help="Clip i draws from (seed, i).")
@click.option("--group", default="voice", show_default=True,
              type=click.Choice(["voice", "synth"]),
              help="What the list's client_id (the split's group) holds: `synth:voice`, or "
                   "the synthesizer.")
@click.option("--holdout", multiple=True,
              help="A synthesizer (festival) or voice (espeak:m3) whose clips go to test.tsv, "
                   "the rest to train.tsv (for split.by: given). Repeatable.")
@click.option("--sample-rate", default=16000, show_default=True,
              type=click.IntRange(8000, 48000), help="Written sample rate, Hz.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64),
              help="Synthesizer processes at a time.")
def main(texts, out, synths, voices, per_text, seed, group, holdout, sample_rate, workers):
    """Speak each text with espeak-ng's and Festival's voices into a data.source folder."""
    from stages.tasks.speech import synth

    try:
        synth.check_out(out, [("--texts", texts)])
        lines = synth.read_texts(texts)
        pool = synth.voice_pool([s for s in synths.split(",") if s],
                                [v for v in voices.split(",") if v])
        bad = [h for h in holdout if h not in pool and not any(
            h == f"{s}:{v}" for s, vs in pool.items() for v in vs)]
        if bad:
            raise ValueError(f"--holdout {', '.join(bad)}: not one of the chosen synthesizers "
                             f"({', '.join(pool)}) nor a `synth:voice` among their voices")
        total = len(lines) * per_text
        if total > synth.MAX_CLIPS:
            raise ValueError(f"--texts x --per-text is {total} clips, over {synth.MAX_CLIPS}")
        plans = [synth.plan(i, lines[i // per_text], pool, seed) for i in range(total)]
        with click.progressbar(length=total, label="synth_speech", file=sys.stderr) as bar:
            counts = synth.write(out, plans, tuple(holdout), group, sample_rate, workers,
                                 bar.update)
    except (ValueError, RuntimeError, OSError) as exc:
        click.echo(f"synth_speech: {exc}", err=True)
        sys.exit(2)
    for (name, voice), n in sorted(counts.items()):
        tag = "  (held out: test)" if name in holdout or f"{name}:{voice}" in holdout else ""
        click.echo(f"{n:6d}  {name}:{voice}{tag}")
    click.echo(f"wrote {total} clips of {len(lines)} texts to {out}/clips/ and their list"
               + (" (train.tsv, test.tsv)" if holdout else " (validated.tsv)"))


if __name__ == "__main__":
    main()
