"""The OCR gate's own checks: transcripts, the CTC length rule, the charset, line shape.

The CTC rule, exactly: a transcript of L characters with R adjacent repeated pairs ("ll" in
"hello" is one) has an alignment in T frames only when T >= L + R (a blank must separate each
repeat; the issue's worst case 2L - 1 is all characters repeated). T is the frames the line's own
pixels give the model: its width after prepare scales it to prepare.height (aspect kept, capped
at prepare.width, as prepare does), divided by the model's horizontal stride (4). Without this
check, CTC's loss is infinite for such a line and `zero_infinity` would silently train on nothing
for it.
"""
from stages.lib.show import clip, invisible, listed, only_invisible, repeats
from stages.tasks.base import BLOCKING, WARNING
from stages.tasks.common.ctctext import (EMPTY_TEXT, UNKNOWN_CHAR, WHITESPACE, needs,
                                         text_columns, text_expectations, text_reason,
                                         text_values)

STRIDE = 4  # input columns per output frame of the CRNN (model.py)

CHECKS = {
    "unlabelled": (BLOCKING, "an image with no transcript (not in the list, or no .txt beside "
                             "it)"),
    "missing": (BLOCKING, "a listed file (or a .txt) with no image under data.source"),
    "duplicate_entry": (BLOCKING, "a path listed more than once in rec_gt.txt or the JSONL"),
    "bad_list": (BLOCKING, "a transcript list (or .txt) that is not UTF-8 or has malformed "
                           "lines"),
    "empty_text": EMPTY_TEXT,
    "too_long": (BLOCKING, "more characters than CTC can emit for the line's width: frames "
                           "< length + adjacent repeats"),
    "unknown_char": UNKNOWN_CHAR,
    "aspect": (BLOCKING, "a line taller than wide by more than validate.max_aspect"),
    "whitespace": WHITESPACE,
    "invisible_text": (WARNING, "a transcript holding a control (Cc), format (Cf) or line or "
                                "paragraph separator (Zl, Zp) character (NUL, ESC, VT, DEL, "
                                "U+200B, U+202E, U+2028...), alone or among visible text: it "
                                "prints nothing or moves what follows; with validate.charset "
                                "they are unknown_char, which blocks"),
}
COLUMNS = ("text_empty", "ctc_slack", "unknown_chars", "aspect", "edge_space", "text_invisible")


def has_invisible(text: str) -> bool:
    """Any control, format or line/paragraph separator character (stages.lib.show.INVISIBLE),
    TAB included."""
    return any(invisible(c) for c in text)


def frames(width: int, height: int, geometry) -> int:
    """CTC frames the line's pixels span once prepared: (line height, max width) geometry."""
    line_h, max_w = geometry
    scaled = min(max(1, round(width * line_h / height)), max_w) if height else 0
    return scaled // STRIDE


def check_columns(rows, ok, p, geometry) -> dict:
    def num(v):
        return int(v) if str(v).strip() else 0

    charset = set(p.charset)

    def values(r):
        text, w, h = r["text"], num(r["width"]), num(r["height"])
        return {**text_values(text, charset),
                "ctc_slack": frames(w, h, geometry) - len(text) - repeats(text),
                "aspect": h / w if w else 0.0, "text_invisible": int(has_invisible(text))}

    return text_columns(rows, ok, COLUMNS, values)


def file_expectations(p) -> list:
    return text_expectations(p, [("empty_text", "text_empty", None),
                                 ("too_long", "ctc_slack", {"min_value": 0}),
                                 ("aspect", "aspect", {"max_value": p.max_aspect}),
                                 ("whitespace", "edge_space", None),
                                 ("invisible_text", "text_invisible", None)])


def reason(check, row, p, geometry) -> str:
    text = row["text"]
    w, h = int(row["width"] or 0), int(row["height"] or 0)
    if check == "empty_text":
        return "empty transcript"
    if check == "too_long":
        return (f"{needs(text)} but the {w}x{h} line gives {frames(w, h, geometry)} at "
                f"prepare.height {geometry[0]} (prepare.width {geometry[1]}, stride {STRIDE})")
    if check == "aspect":
        return (f"{w}x{h}: taller than wide by {h / w:.2f} > validate.max_aspect "
                f"({p.max_aspect}); is it rotated or not a text line?")
    if check == "invisible_text":
        bad = [c for c in text if invisible(c)]
        what = ("holds only control or zero-width characters" if only_invisible(text) else
                f"holds {len(bad)} control, format or separator character(s) ({listed(bad)}) "
                f"among its text")
        return (f"transcript {clip(text)} {what}: fix the transcript"
                + ("" if p.charset else ", or set validate.charset to block such lines"))
    return text_reason(check, row, p)
