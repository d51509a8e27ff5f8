"""Synthetic speech from your texts (tools.synth_speech): every text spoken by espeak-ng's and
Festival's English voices (stages/tasks/common/synth_render.py), 16-bit mono
WAV, written in the Common Voice layout the speech task reads (clips/ and a list: client_id,
path, sentence, then synth and voice). Seeded and deterministic: clip i's synthesizer is the
i-th of the chosen ones in turn, its voice, rate, pitch, gain, noise and echo are drawn from
PCG64 seeded with (seed, i), so its bytes depend on (seed, i, its text, the voices chosen)
alone. Each clip's group (client_id) is its voice (`synth:voice`) or its synthesizer, and
--holdout writes the split (train.tsv, test.tsv; `split.by: given`) with whole synthesizers
or voices in test.
"""
import os
import shutil
from pathlib import Path

import numpy as np

from stages.tasks.common.synth_render import SYNTHS, render

MARKER = ".synth_speech"
MARKER_TEXT = "written by tools.synth_speech: its next run with this --out replaces this folder\n"
COLUMNS = ("client_id", "path", "sentence", "synth", "voice")
RATE = (140, 220)  # words a minute
PITCH = (20, 80)  # 0-99, 50 the voice's own
GAIN = (0.4, 1.1)
NOISE = (0.001, 0.01)  # white noise RMS, full scale 1.0
ECHO = (0.15, 0.4)  # the room's reflection decay, for half the clips
CHUNK = 32  # clips synthesized at a time (the progress bar's step)
MAX_CLIPS = 1_000_000


def read_texts(path: Path) -> list[str]:
    """The non-blank lines of a UTF-8 file, stripped; a ValueError naming the file and fix."""
    try:
        lines = Path(path).read_text(encoding="utf-8-sig").splitlines()
    except FileNotFoundError:
        raise ValueError(f"--texts {path}: no such file; give a UTF-8 file with one text a "
                         f"line") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"--texts {path}: not UTF-8 ({exc.reason} at byte {exc.start}); "
                         f"save it as UTF-8") from None
    texts = [t.strip() for t in lines if t.strip()]
    bad = [n for n, t in enumerate(lines, 1) if "\t" in t]
    if bad:
        raise ValueError(f"--texts {path}: line {bad[0]} holds a tab, which the list's "
                         f"columns cannot; one text a line, no tabs")
    if not texts:
        raise ValueError(f"--texts {path}: no text in it (one text a line)")
    return texts


def voice_pool(synths, voices=()) -> dict:
    """{synth: [voices]} of the chosen synthesizers: every English voice each has here, or
    only those of `voices` (`synth:voice`, or a voice name one synthesizer has)."""
    from stages.tasks.common import festival_synth, speech_synth

    unknown = [s for s in synths if s not in SYNTHS]
    if unknown or not synths:
        raise ValueError(f"--synths {','.join(synths)}: give some of {', '.join(SYNTHS)}")
    have = {}
    if "espeak" in synths:
        have["espeak"] = speech_synth.variants()
    if "festival" in synths:
        festival_synth.festival()  # not installed: the error names the packages
        have["festival"] = festival_synth.voices()
        if not have["festival"]:
            raise ValueError(f"Festival has no English voice installed: apt-get install -y "
                             f"{festival_synth.PACKAGES}")
    if not voices:
        return have
    pool = {s: [] for s in synths}
    for item in voices:
        synth, _, name = item.rpartition(":")
        owners = [s for s in synths if (not synth or s == synth) and name in have[s]]
        if not owners:
            raise ValueError(f"--voices {item}: no such voice among {', '.join(synths)}'s "
                             f"(espeak-ng's voice variants such as m3, f2; Festival's "
                             f"{', '.join(festival_synth.VOICES)})")
        pool[owners[0]].append(name)
    empty = [s for s in synths if not pool[s]]
    if empty:
        raise ValueError(f"--voices names no voice of {', '.join(empty)}; name one, or leave "
                         f"{', '.join(empty)} out of --synths")
    return {s: sorted(set(v)) for s, v in pool.items()}


def plan(i: int, text: str, pool: dict, seed: int) -> dict:
    """Everything about clip i, from (seed, i) and its text alone."""
    rng = np.random.Generator(np.random.PCG64([seed, i]))
    synths = list(pool)
    synth = synths[i % len(synths)]
    voices = pool[synth]
    return {"text": text, "synth": synth, "voice": voices[int(rng.integers(len(voices)))],
            "rate": int(rng.integers(RATE[0], RATE[1] + 1)),
            "pitch": int(rng.integers(PITCH[0], PITCH[1] + 1)),
            "gain": float(rng.uniform(*GAIN)), "noise": float(rng.uniform(*NOISE)),
            "echo": float(rng.uniform(*ECHO)) if rng.random() < 0.5 else 0.0,
            "seed": int(rng.integers(2**32))}


def held(p: dict, holdout) -> bool:
    return any(h in (p["synth"], f"{p['synth']}:{p['voice']}") for h in holdout)


def check_out(out: Path, inputs=()) -> None:
    """A ValueError when replacing out could lose what synth_speech did not write."""
    full = Path(out).resolve()
    here = Path.cwd().resolve()
    if full == here or full in here.parents or full.parent == full:
        raise ValueError(f"--out {out}: the working directory or a folder above it; give a new "
                         f"folder (--out data/speech)")
    for flag, path in inputs:
        if full == Path(path).resolve() or full in Path(path).resolve().parents:
            raise ValueError(f"--out {out}: holds {flag} {path}; give an --out outside it")
    if full.exists() and not (full.is_dir() and (full / MARKER).is_file()):
        raise ValueError(f"--out {out}: exists and was not written by synth_speech (no "
                         f"{MARKER} in it), so it is left alone; give a new folder")


def lists(plans, holdout, group: str) -> dict:
    """{list file: text}: validated.tsv, or with holdout train.tsv and test.tsv."""
    rows = {}
    for i, p in enumerate(plans):
        client = p["synth"] if group == "synth" else f"{p['synth']}:{p['voice']}"
        name = "validated.tsv" if not holdout else "test.tsv" if held(p, holdout) else "train.tsv"
        rows.setdefault(name, []).append(
            "\t".join((client, f"{i:06d}.wav", p["text"], p["synth"], p["voice"])) + "\n")
    if holdout:
        for name in ("train.tsv", "test.tsv"):
            if name not in rows:
                raise ValueError(f"--holdout {','.join(holdout)}: leaves {name} empty; hold "
                                 f"out some of the synthesizers or voices, not all or none")
    return {name: "\t".join(COLUMNS) + "\n" + "".join(r) for name, r in rows.items()}


def write(out: Path, plans, holdout=(), group: str = "voice", sample_rate: int = 16000,
          workers: int = 1, progress=None) -> dict:
    """Write out/clips/NNNNNN.wav and the lists, through a marked temp folder renamed into
    place (an existing out only when synth_speech wrote it); {(synth, voice): clips}.
    progress(n): called after every CHUNK of clips."""
    out = Path(out)
    texts = lists(plans, holdout, group)
    tmp = out.with_name(f".{out.name}.synth_speech-{os.getpid()}.part")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "clips").mkdir(parents=True)
    try:
        (tmp / MARKER).write_text(MARKER_TEXT, encoding="utf-8")
        for start in range(0, len(plans), CHUNK):
            chunk = plans[start:start + CHUNK]
            for k, data in enumerate(render(chunk, sample_rate, workers)):
                (tmp / "clips" / f"{start + k:06d}.wav").write_bytes(data)
            if progress:
                progress(len(chunk))
        for name, text in texts.items():
            (tmp / name).write_text(text, encoding="utf-8")
        old = out.with_name(f".{out.name}.synth_speech-{os.getpid()}.old")
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    counts = {}
    for p in plans:
        counts[(p["synth"], p["voice"])] = counts.get((p["synth"], p["voice"]), 0) + 1
    return counts
