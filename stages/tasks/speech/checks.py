"""The speech gate's own checks: transcripts (empty, invisible only, outside the charset) and
the CTC length rule. The audio itself (decode, silence, clipping, rate, channels, duration,
duplicates) is the audio modality's gate (stages/lib/modality/).

The CTC rule: a transcript of L characters with R adjacent repeated pairs ("ee" in "three")
has an alignment in T frames only when T >= L + R. T is the frames the clip gives the model:
its duration (capped at prepare.max_seconds, as prepare crops it) in feature frames (one per
prepare.hop samples), divided by the model's time stride (STRIDE). Without this check CTC's
loss is infinite for such a clip and `zero_infinity` would silently train on nothing for it.
"""
from stages.lib.show import (
    clip, invisible, listed, only_invisible, outside, repeats)
from stages.tasks.base import BLOCKING, WARNING

STRIDE = 2  # feature frames per output frame of the models (model.py)

CHECKS = {
    "unlabelled": (BLOCKING, "a clip with no transcript (not in the list)"),
    "missing": (BLOCKING, "a listed clip not found under data.source"),
    "duplicate_entry": (BLOCKING, "a clip listed more than once"),
    "bad_list": (BLOCKING, "a transcript list that is not UTF-8 or has malformed lines"),
    "empty_text": (BLOCKING, "an empty (or all-whitespace) transcript"),
    "invisible_text": (BLOCKING, "a transcript made only of invisible characters (control, "
                                 "format, zero-width: NUL, U+200B, U+202E...)"),
    "unknown_char": (BLOCKING, "a character outside validate.charset (when it is given)"),
    "too_long": (BLOCKING, "more characters than CTC can emit for the clip's duration: frames "
                           "< length + adjacent repeats"),
    "whitespace": (WARNING, "leading or trailing whitespace in a transcript"),
    "invisible_chars": (WARNING, "a transcript holding invisible characters among its text"),
}






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
    cols = {"text_empty": [], "text_invisible": [], "unknown_chars": [], "ctc_slack": [],
            "edge_space": [], "invisible_chars": []}
    charset = set(p.charset)
    for r, good in zip(rows, ok, strict=True):
        if not good:
            for c in cols.values():
                c.append(None)
            continue
        text = r["text"]
        blank = not text.strip()
        cols["text_empty"].append(int(blank))
        cols["text_invisible"].append(int(only_invisible(text)))
        cols["unknown_chars"].append(sum(c not in charset for c in text) if charset else None)
        cols["ctc_slack"].append(frames(seconds_of(r), geometry) - len(text) - repeats(text)
                                 if not blank else None)
        cols["edge_space"].append(int(text != text.strip()) if not blank else 0)
        cols["invisible_chars"].append(int(any(invisible(c) for c in text)
                                           and not only_invisible(text)))
    return cols


def file_expectations(p) -> list:
    import great_expectations as gx

    e = gx.expectations
    suite = [("empty_text", e.ExpectColumnValuesToBeInSet(column="text_empty", value_set=[0])),
             ("invisible_text", e.ExpectColumnValuesToBeInSet(column="text_invisible",
                                                              value_set=[0])),
             ("too_long", e.ExpectColumnValuesToBeBetween(column="ctc_slack", min_value=0)),
             ("whitespace", e.ExpectColumnValuesToBeInSet(column="edge_space", value_set=[0])),
             ("invisible_chars", e.ExpectColumnValuesToBeInSet(column="invisible_chars",
                                                               value_set=[0]))]
    if p.charset:
        suite.append(("unknown_char", e.ExpectColumnValuesToBeBetween(column="unknown_chars",
                                                                      max_value=0)))
    return suite


def reason(check, row, p, geometry) -> str:
    text = row["text"]
    if check == "empty_text":
        return "empty transcript" if not text else f"transcript {clip(text)} is only whitespace"
    if check == "invisible_text":
        return (f"transcript {clip(text)} holds only invisible characters "
                f"({listed(c for c in text if invisible(c))}): write what is said")
    if check == "unknown_char":
        return outside(text, p.charset)
    if check == "too_long":
        seconds = seconds_of(row)
        rate, hop, longest = geometry
        return (f"transcript {clip(text)} needs {len(text) + repeats(text)} CTC frames "
                f"({len(text)} characters + {repeats(text)} adjacent repeats) but the "
                f"{seconds:.2f} s clip gives {frames(seconds, geometry)} (prepare.sample_rate "
                f"{rate}, prepare.hop {hop}, stride {STRIDE}"
                + (f", cropped to prepare.max_seconds {longest}" if longest else "") + ")")
    if check == "whitespace":
        return f"leading or trailing whitespace in {clip(text)} (kept as written)"
    if check == "invisible_chars":
        bad = [c for c in text if invisible(c)]
        return (f"transcript {clip(text)} holds {len(bad)} invisible character(s) "
                f"({listed(bad)}) among its text: fix the transcript"
                + ("" if p.charset else ", or set validate.charset to block such clips"))
    return row["error"] or check  # an annotation error: ingest's message
