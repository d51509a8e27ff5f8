"""Synthesized speech from Festival, the second synthesizer beside espeak-ng (speech_synth.py):
Debian's `festival` 2.5 and its three English voices, run as a program, a fresh process per
text, then the same deterministic numpy post-processing as espeak-ng's clips.

| voice | Debian package | what |
|---|---|---|
| kal_diphone | festvox-kallpc16k | an American male diphone voice (residual-excited LPC), 16 kHz |
| ked_diphone | festvox-kdlpc16k | another American male diphone voice, 16 kHz |
| cmu_us_slt_arctic_hts | festvox-us-slt-hts | an American female statistical (HTS) voice, 32 kHz |

A job is (text, voice, rate, pitch) as for espeak-ng: rate in words a minute (espeak-ng's
default, 175, is the voice's own speed: Festival's Duration_Stretch, the HTS engine's speed
`-r`), pitch 0-99 (50 is the voice's own): the voice is played faster or slower by 2 **
((pitch - 50) / 50 * PITCH_SEMITONES / 12), which moves its pitch and formants together (a
smaller or larger speaker), and synthesized slower or faster by the same factor so the rate
holds. Festival draws no random numbers in these voices; a fresh process per text (its own
$HOME, so no ~/.festivalrc) gives bytes that depend only on the job.
tests/test_festival_synth.py synthesizes the same texts in two orders and pins their hashes.
"""
import os
import shutil
import subprocess
import tempfile
import wave

import numpy as np

VOICES = {"kal_diphone": "festvox-kallpc16k", "ked_diphone": "festvox-kdlpc16k",
          "cmu_us_slt_arctic_hts": "festvox-us-slt-hts"}  # voice: its Debian package
PACKAGES = "festival " + " ".join(VOICES.values())
NOMINAL_RATE = 175  # words a minute at Duration_Stretch 1 (espeak-ng's default rate)
PITCH_SEMITONES = 4.0  # pitch 0 and 99 are about this many semitones below and above 50
RATE_STEP = 100  # the played-back rate is rounded to this many Hz (a short resampler period)
JOB_TIMEOUT = 120  # seconds one text may take (a quarter of a second idle): past it, an error

SCRIPT = """(voice_{voice})
(Parameter.set 'Duration_Stretch {stretch!r})
{hts}(set! s55_utt (Utterance Text "{text}"))
(utt.synth s55_utt)
(utt.save.wave s55_utt "out.wav" 'riff)
"""
HTS = "(set! hts_engine_params (append hts_engine_params (list (list \"-r\" {speed!r}))))\n"


def festival() -> str:
    """The festival program's path, or an error naming the packages to install."""
    path = shutil.which("festival")
    if not path:
        raise RuntimeError(f"Festival is not installed (no `festival` program on PATH): "
                           f"apt-get install -y {PACKAGES}")
    return path


def voices() -> list[str]:
    """The voices of VOICES that are installed, in VOICES' order (Festival's voice folders)."""
    found = []
    for name in VOICES:
        for lang in ("english", "us"):
            if os.path.isdir(f"/usr/share/festival/voices/{lang}/{name}"):
                found.append(name)
                break
    return found


def check_voices(names) -> None:
    """An error naming each voice that is not one of VOICES or not installed, and its package."""
    unknown = sorted(set(names) - set(VOICES))
    if unknown:
        raise RuntimeError(f"Festival has no voice {', '.join(unknown)} here; its English "
                           f"voices are {', '.join(VOICES)}")
    missing = sorted(set(names) - set(voices()))
    if missing:
        raise RuntimeError(f"Festival voice {', '.join(missing)} is not installed: apt-get "
                           f"install -y {' '.join(VOICES[v] for v in missing)}")


def require(who: str) -> None:
    """A StageError (printed without a traceback) naming every package to install when
    festival or any voice of VOICES is missing (who: what needs them, for the message)."""
    from stages.lib.io import StageError

    if not shutil.which("festival") or voices() != list(VOICES):
        raise StageError(f"{who} speaks with Festival's English voices too, and they are not "
                           f"all installed here: apt-get install -y {PACKAGES}")


def pitch_factor(pitch: int) -> float:
    """How much faster the voice is played back for pitch 0-99 (1.0 at 50)."""
    return 2.0 ** ((int(pitch) - 50) / 50 * PITCH_SEMITONES / 12)


def scheme(text: str, voice: str, rate: int, pitch: int) -> str:
    """The Scheme program that synthesizes one job into out.wav in the current folder."""
    factor = pitch_factor(pitch)
    stretch = round(NOMINAL_RATE / int(rate) * factor, 6)
    quoted = str(text).replace("\\", "\\\\").replace('"', '\\"')
    hts = HTS.format(speed=round(1 / stretch, 6)) if voice.endswith("_hts") else ""
    if hts:
        stretch = 1.0  # the HTS engine times the speech itself: its speed -r instead
    return SCRIPT.format(voice=voice, stretch=stretch, hts=hts, text=quoted)


def _synth_one(job) -> tuple[np.ndarray, int]:
    """(int16 samples, the rate they are to be played at) of one job, in a fresh festival."""
    text, voice, rate, pitch = job
    with tempfile.TemporaryDirectory(prefix="festival-") as tmp:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp, "LANG": "C",
               "LC_ALL": "C"}
        try:
            proc = subprocess.run([festival(), "--pipe"], input=scheme(*job), cwd=tmp, env=env,
                                  capture_output=True, text=True, timeout=JOB_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"festival did not finish {text!r} (voice {voice!r}) within "
                               f"{JOB_TIMEOUT} s; nothing was written") from None
        out = os.path.join(tmp, "out.wav")
        if proc.returncode != 0 or not os.path.exists(out):
            said = (proc.stderr or proc.stdout).strip()[-400:]
            raise RuntimeError(f"festival failed on {text!r} (voice {voice!r}, exit "
                               f"{proc.returncode}): {said}")
        with wave.open(out, "rb") as w:
            if w.getnchannels() != 1 or w.getsampwidth() != 2:
                raise RuntimeError(f"festival wrote {w.getnchannels()} channel(s) of "
                                   f"{8 * w.getsampwidth()} bits for {text!r}, not 16-bit mono")
            rate_hz, data = w.getframerate(), w.readframes(w.getnframes())
    played = int(round(rate_hz * pitch_factor(pitch) / RATE_STEP)) * RATE_STEP
    return np.frombuffer(data, dtype="<i2").copy(), played


def synthesize(jobs, workers: int = 1) -> list[tuple[np.ndarray, int]]:
    """(int16 samples, their rate in Hz) of each (text, voice, rate, pitch), in order: one
    festival process per job, `workers` at a time (threads that each wait on a process)."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = [(str(t), str(v), int(r), int(p)) for t, v, r, p in jobs]
    check_voices({v for _, v, _, _ in jobs})
    festival()
    with ThreadPoolExecutor(max(1, workers)) as pool:
        return list(pool.map(_synth_one, jobs))
