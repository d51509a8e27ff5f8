"""The audio modality's part of the data gate: validate's per-file checks of what ingest found
in each sound file (a full decode, frames, NaN/inf samples, channels, duration, silence,
clipping), each named per file.

As every modality's gate: the columns of validate's table (`check_columns`), the great_expectations
expectations over them (`expectations`), each check's message (`reason`) and kind
(`CHECKS`). The thresholds are validate's audio keys (stages/lib/params.py: min_seconds,
max_seconds, silence_db, max_clipped; read with their defaults, so a validate section
without them checks as the defaults say). The sample rate is checked against prepare's
feature rate by the task (rate_columns), which reads prepare's settings (Task.configure).
"""
import math

from stages.lib.checks import BLOCKING, WARNING

MAX_CHANNELS = 2
# the gate's defaults (stages/lib/params.py Validate declares the same)
GATE_DEFAULTS = {"min_seconds": 0.1, "max_seconds": 30.0, "silence_db": -60.0,
                 "max_clipped": 0.01}

# {check: (kind, description)}, blocking first (checks.shared puts them in their places)
CHECKS = {
    "undecodable": (BLOCKING, "a full decode fails (truncated, random bytes, text, a format "
                              "libsndfile does not read)"),
    # (no longer written: ingest refuses a clip over validate.max_seconds as duration; kept,
    # so that metrics/validation_checks.json keeps its keys)
    "too_large": (BLOCKING, "over the decode bound (never decoded)"),
    "zero_frames": (BLOCKING, "no samples at all"),
    "nonfinite": (BLOCKING, "NaN or infinite samples (float files)"),
    "channels": (BLOCKING, f"more than {MAX_CHANNELS} channels"),
    "duration": (BLOCKING, "duration outside validate.min_seconds..validate.max_seconds"),
    "near_duplicate": (WARNING, "log-mel hashes within validate.near_dup_distance bits: "
                                "grouped with the nearest representative, in its split"),
    "silence": (WARNING, "RMS under validate.silence_db (dB full scale)"),
    "clipping": (WARNING, "more than validate.max_clipped of the samples at full scale"),
}


def knob(p, name: str):
    return getattr(p, name, GATE_DEFAULTS[name])


def _num(v, cast=float):
    return cast(v) if str(v).strip() else cast(0)


def rms_db(row) -> float:
    """A row's RMS in dB full scale (-inf for digital silence)."""
    rms = _num(row["rms"])
    return 20 * math.log10(rms) if rms > 0 else -math.inf


def check_columns(rows, ok, p) -> dict:
    """{column: one value per row} of validate's table; None where a check does not apply (a
    row with an ingest error: ok False)."""
    def each(value):
        return [value(r) if g else None for r, g in zip(rows, ok, strict=True)]

    return {
        "frames": each(lambda r: _num(r["frames"], int)),
        "nonfinite": each(lambda r: _num(r["nonfinite"], int)),
        "channels": each(lambda r: _num(r["channels"], int)),
        # only clips with samples: zero frames is its own check; a clip ingest did not decode
        # for its length (error_kind duration) is checked from its header's duration
        "duration": [_num(r["duration"]) if (g or r["error_kind"] == "duration")
                     and _num(r["frames"], int) else None
                     for r, g in zip(rows, ok, strict=True)],
        "rms_db": [max(rms_db(r), -1000.0) if g and _num(r["frames"], int) else None
                   for r, g in zip(rows, ok, strict=True)],
        "clipped": each(lambda r: _num(r["clipped"])),
    }


def expectations(p) -> list:
    """[(check, great_expectations expectation)] over check_columns' columns (p: the validate
    params)."""
    import great_expectations as gx

    e = gx.expectations
    return [
        ("zero_frames", e.ExpectColumnValuesToBeBetween(column="frames", min_value=1)),
        ("nonfinite", e.ExpectColumnValuesToBeBetween(column="nonfinite", max_value=0)),
        ("channels", e.ExpectColumnValuesToBeBetween(column="channels", max_value=MAX_CHANNELS)),
        ("duration", e.ExpectColumnValuesToBeBetween(
            column="duration", min_value=knob(p, "min_seconds"),
            max_value=knob(p, "max_seconds"))),
        ("silence", e.ExpectColumnValuesToBeBetween(column="rms_db",
                                                    min_value=knob(p, "silence_db"))),
        ("clipping", e.ExpectColumnValuesToBeBetween(column="clipped",
                                                     max_value=knob(p, "max_clipped"))),
    ]


def reason(check: str, row: dict, p) -> str | None:
    """Why a manifest row fails one of the audio checks; None for a check of another layer."""
    messages = {
        "too_large": lambda: row["error"] or "too large",
        "zero_frames": lambda: f"zero frames: a {row['format']} file with no samples",
        "nonfinite": lambda: f"{row['nonfinite']} NaN or infinite samples",
        "channels": lambda: f"{row['channels']} channels (at most {MAX_CHANNELS}: mono or "
                            f"stereo)",
        "duration": lambda: f"duration {_num(row['duration']):.3f} s outside "
                            f"validate.min_seconds..max_seconds ({knob(p, 'min_seconds')}.."
                            f"{knob(p, 'max_seconds')} s)",
        "silence": lambda: f"silent: RMS {rms_db(row):.1f} dBFS under validate.silence_db "
                           f"({knob(p, 'silence_db')})",
        "clipping": lambda: f"clipping: {100 * _num(row['clipped']):.2f}% of the samples at "
                            f"full scale (validate.max_clipped: "
                            f"{100 * knob(p, 'max_clipped'):.2f}%)",
    }
    return messages[check]() if check in messages else None


# ---- the sample-rate check: a task's (its rate is prepare's, which Task.configure reads)

RATE_CHECK = {"sample_rate": (WARNING, "a sample rate other than prepare's feature rate "
                                       "(prepare.audio.sample_rate): resampled")}


def rate_columns(rows, ok, rate: int) -> tuple:
    """({"sample_rate": one value per row}, {rate: count} of the files resampled) for a
    Task.check_columns: 1 where the file's rate is `rate` (None where it does not apply)."""
    from collections import Counter

    column, counts = [], Counter()
    for r, g in zip(rows, ok, strict=True):
        if not g or not _num(r["sample_rate"], int):
            column.append(None)
            continue
        same = _num(r["sample_rate"], int) == rate
        column.append(1 if same else 0)
        if not same:
            counts[_num(r["sample_rate"], int)] += 1
    return {"sample_rate": column}, dict(sorted(counts.items()))


def rate_expectations() -> list:
    import great_expectations as gx

    return [("sample_rate", gx.expectations.ExpectColumnValuesToBeInSet(column="sample_rate",
                                                                        value_set=[1]))]


def rate_reason(row: dict, rate: int, counts: dict) -> str:
    by_rate = ", ".join(f"{k} Hz: {v}" for k, v in counts.items())
    return (f"sample rate {row['sample_rate']} Hz, not {rate} Hz: resampled (files resampled, "
            f"by rate: {by_rate})")
