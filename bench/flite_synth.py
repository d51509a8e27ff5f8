"""A third synthesizer for the speech bench only: CMU Flite (Debian's `flite` 2.2), a separate
engine from espeak-ng and Festival, which no sample, recipe or tools.synth_speech run trains on.
bench/speech_peer.py --other flite reads its clips to measure a model on a synthesizer it never
heard after training on espeak-ng and Festival.

| voice | what |
|---|---|
| awb | a Scottish English male, statistical parametric (clustergen) |
| rms | an American male, clustergen |
| slt | an American female, clustergen (the speaker of Festival's HTS voice, another engine) |
| kal16 | an American male diphone voice (the speaker of Festival's kal_diphone) |

A job is (text, voice, rate, pitch) as for Festival (stages/tasks/common/festival_synth.py):
rate in words a minute (175 is the voice's own speed, flite's duration_stretch 1), pitch 0-99
played by speeding the voice up or slowing it down, as Festival's clips are. The clip's gain,
noise and echo are then those of tools.synth_speech (speech_synth.post_process).
"""
import os
import shutil
import subprocess
import tempfile
import wave

import numpy as np

VOICES = ("awb", "rms", "slt", "kal16")
PACKAGE = "flite"


def flite() -> str:
    path = shutil.which("flite")
    if not path:
        raise RuntimeError(f"Flite is not installed (no `flite` program on PATH): apt-get "
                           f"install -y {PACKAGE}")
    return path


def synth_one(job) -> tuple[np.ndarray, int]:
    """(int16 samples, the rate they are to be played at) of (text, voice, rate, pitch)."""
    from stages.tasks.common.festival_synth import NOMINAL_RATE, RATE_STEP, pitch_factor

    text, voice, rate, pitch = job
    factor = pitch_factor(pitch)
    stretch = round(NOMINAL_RATE / int(rate) * factor, 6)
    with tempfile.TemporaryDirectory(prefix="flite-") as tmp:
        out = os.path.join(tmp, "out.wav")
        proc = subprocess.run([flite(), "-voice", voice, "--setf",
                               f"duration_stretch={stretch}", "-t", str(text), "-o", out],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"flite failed on {text!r} (voice {voice!r}): "
                               f"{(proc.stderr or proc.stdout).strip()[-400:]}")
        with wave.open(out, "rb") as w:
            rate_hz, data = w.getframerate(), w.readframes(w.getnframes())
    played = int(round(rate_hz * factor / RATE_STEP)) * RATE_STEP
    return np.frombuffer(data, dtype="<i2").copy(), played


def write(out, plans, sample_rate: int = 16000, workers: int = 2) -> None:
    """out/clips/NNNNNN.wav of each plan (tools.synth_speech's plan: text, voice, rate, pitch,
    gain, noise, echo, seed), flite processes `workers` at a time."""
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from stages.tasks.common import speech_synth

    flite()
    clips = Path(out) / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    jobs = [(p["text"], p["voice"], p["rate"], p["pitch"]) for p in plans]
    with ThreadPoolExecutor(max(1, workers)) as pool:
        raw = list(pool.map(synth_one, jobs))
    for i, (p, (samples, rate)) in enumerate(zip(plans, raw, strict=True)):
        x = speech_synth.post_process(samples, sample_rate, p["seed"], p["gain"], p["noise"],
                                      p["echo"], source_rate=rate)
        (clips / f"{i:06d}.wav").write_bytes(speech_synth.wav_bytes(x, sample_rate))
