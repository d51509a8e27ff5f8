"""Speech from either synthesizer, one plan a clip: espeak-ng (speech_synth.py) and Festival
(festival_synth.py) side by side, for the audio and speech samples and tools.synth_speech.

A plan is a dict with the clip's synth ("espeak" or "festival"), text, voice, rate (words a
minute), pitch (0-99), and the post-processing's gain, noise, echo and seed
(speech_synth.post_process). Each synthesizer's jobs run in its own fresh processes, so a
clip's bytes depend on its plan alone, not on the other clips rendered with it.
"""
SYNTHS = ("espeak", "festival")


def render(plans, sample_rate: int = 16000, workers: int = 1) -> list[bytes]:
    """WAV bytes (16-bit mono at sample_rate) of each plan, in order."""
    from stages.tasks.common import festival_synth, speech_synth

    plans = list(plans)
    unknown = sorted({p["synth"] for p in plans} - set(SYNTHS))
    if unknown:
        raise ValueError(f"no synthesizer {', '.join(unknown)}; one of {', '.join(SYNTHS)}")
    out = [None] * len(plans)
    for synth in SYNTHS:
        at = [k for k, p in enumerate(plans) if p["synth"] == synth]
        if not at:
            continue
        jobs = [(plans[k]["text"], plans[k]["voice"], plans[k]["rate"], plans[k]["pitch"])
                for k in at]
        if synth == "espeak":
            raw = [(x, speech_synth.ESPEAK_RATE) for x in speech_synth.synthesize(jobs, workers)]
        else:
            raw = festival_synth.synthesize(jobs, workers)
        for k, (samples, rate) in zip(at, raw, strict=True):
            p = plans[k]
            wave = speech_synth.post_process(samples, sample_rate, p["seed"], p["gain"],
                                             p["noise"], p["echo"], source_rate=rate)
            out[k] = speech_synth.wav_bytes(wave, sample_rate)
    return out
