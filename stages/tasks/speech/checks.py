"""The speech gate's own checks: transcripts (empty, invisible only, outside the charset) and
the CTC length rule. The audio itself (decode, silence, clipping, rate, channels, duration,
duplicates) is the audio modality's gate (stages/lib/modality/).

The CTC rule: a transcript of L characters with R adjacent repeated pairs ("ee" in "three")
has an alignment in T frames only when T >= L + R. T is the frames the clip gives the model:
its duration (capped at prepare.max_seconds, as prepare crops it) in feature frames (one per
prepare.hop samples), divided by the model's time stride (STRIDE). Without this check CTC's
loss is infinite for such a clip and `zero_infinity` would silently train on nothing for it.
"""
from stages.lib.show import clip, invisible, listed, only_invisible, repeats
from stages.tasks.base import BLOCKING, WARNING
from stages.tasks.common.ctctext import (EMPTY_TEXT, UNKNOWN_CHAR, WHITESPACE, needs,
                                         text_columns, text_expectations, text_reason,
                                         text_values)

STRIDE = 2  # feature frames per output frame of the models (model.py)

CHECKS = {
    "unlabelled": (BLOCKING, "a clip with no transcript (not in the list)"),
    "missing": (BLOCKING, "a listed clip not found under data.source"),
    "duplicate_entry": (BLOCKING, "a clip listed more than once"),
    "bad_list": (BLOCKING, "a transcript list that is not UTF-8 or has malformed lines"),
    "empty_text": EMPTY_TEXT,
    "invisible_text": (BLOCKING, "a transcript made only of invisible characters (control, "
                                 "format, zero-width: NUL, U+200B, U+202E...)"),
    "unknown_char": UNKNOWN_CHAR,
    "too_long": (BLOCKING, "more characters than CTC can emit for the clip's duration: frames "
                           "< length + adjacent repeats"),
    "whitespace": WHITESPACE,
    "invisible_chars": (WARNING, "a transcript holding invisible characters among its text"),
}
COLUMNS = ("text_empty", "text_invisible", "unknown_chars", "ctc_slack", "edge_space",
           "invisible_chars")


def frames(seconds: float, geometry) -> int:
    """CTC frames a clip of `seconds` gives the model: geometry (sample rate, hop, max
    seconds) as prepare.sample_rate, prepare.hop and prepare.max_seconds give them."""
    rate, hop, longest = geometry
    kept = min(seconds, longest) if longest else seconds
    return int(kept * rate) // hop // STRIDE


def seconds_of(row) -> float:
    try:
        return float(row.get("duration") or 0)
    except ValueError:
        return 0.0


def check_columns(rows, ok, p, geometry) -> dict:
    charset = set(p.charset)

    def values(r):
        text = r["text"]
        blank = not text.strip()
        return {**text_values(text, charset), "text_invisible": int(only_invisible(text)),
                "ctc_slack": frames(seconds_of(r), geometry) - len(text) - repeats(text)
                if not blank else None,
                "invisible_chars": int(any(invisible(c) for c in text)
                                       and not only_invisible(text))}

    return text_columns(rows, ok, COLUMNS, values)


def file_expectations(p) -> list:
    return text_expectations(p, [("empty_text", "text_empty", None),
                                 ("invisible_text", "text_invisible", None),
                                 ("too_long", "ctc_slack", {"min_value": 0}),
                                 ("whitespace", "edge_space", None),
                                 ("invisible_chars", "invisible_chars", None)])


def reason(check, row, p, geometry) -> str:
    text = row["text"]
    if check == "empty_text":
        return "empty transcript" if not text else f"transcript {clip(text)} is only whitespace"
    if check == "invisible_text":
        return (f"transcript {clip(text)} holds only invisible characters "
                f"({listed(c for c in text if invisible(c))}): write what is said")
    if check == "too_long":
        seconds = seconds_of(row)
        rate, hop, longest = geometry
        return (f"{needs(text)} but the {seconds:.2f} s clip gives {frames(seconds, geometry)} "
                f"(prepare.sample_rate {rate}, prepare.hop {hop}, stride {STRIDE}"
                + (f", cropped to prepare.max_seconds {longest}" if longest else "") + ")")
    if check == "invisible_chars":
        bad = [c for c in text if invisible(c)]
        return (f"transcript {clip(text)} holds {len(bad)} invisible character(s) "
                f"({listed(bad)}) among its text: fix the transcript"
                + ("" if p.charset else ", or set validate.charset to block such clips"))
    return text_reason(check, row, p)
