"""The OCR gate's own checks: transcripts, the CTC length rule, the charset, line shape.

The CTC rule, exactly: a transcript of L characters with R adjacent repeated pairs ("ll" in
"hello" is one) has an alignment in T frames only when T >= L + R (a blank must separate each
repeat; the issue's worst case 2L - 1 is all characters repeated). T is the frames the line's own
pixels give the model: its width after prepare scales it to prepare.height (aspect kept, capped
at prepare.width, as prepare does), divided by the model's horizontal stride (4). Without this
check, CTC's loss is infinite for such a line and `zero_infinity` would silently train on nothing
for it.
"""
from stages.lib.show import (
    clip, invisible, listed, only_invisible, outside, repeats)
from stages.tasks.base import BLOCKING, WARNING

STRIDE = 4  # input columns per output frame of the CRNN (model.py)

CHECKS = {
    "unlabelled": (BLOCKING, "an image with no transcript (not in the list, or no .txt beside "
                             "it)"),
    "missing": (BLOCKING, "a listed file (or a .txt) with no image under data.source"),
    "duplicate_entry": (BLOCKING, "a path listed more than once in rec_gt.txt or the JSONL"),
    "bad_list": (BLOCKING, "a transcript list (or .txt) that is not UTF-8 or has malformed "
                           "lines"),
    "empty_text": (BLOCKING, "an empty (or all-whitespace) transcript"),
    "too_long": (BLOCKING, "more characters than CTC can emit for the line's width: frames "
                           "< length + adjacent repeats"),
    "unknown_char": (BLOCKING, "a character outside validate.charset (when it is given)"),
    "aspect": (BLOCKING, "a line taller than wide by more than validate.max_aspect"),
    "whitespace": (WARNING, "leading or trailing whitespace in a transcript"),
    "invisible_text": (WARNING, "a transcript holding a control (Cc), format (Cf) or line or "
                                "paragraph separator (Zl, Zp) character (NUL, ESC, VT, DEL, "
                                "U+200B, U+202E, U+2028...), alone or among visible text: it "
                                "prints nothing or moves what follows; with validate.charset "
                                "they are unknown_char, which blocks"),
}



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

    cols = {"text_empty": [], "ctc_slack": [], "unknown_chars": [], "aspect": [],
            "edge_space": [], "text_invisible": []}
    charset = set(p.charset)
    for r, good in zip(rows, ok, strict=True):
        if not good:
            for c in cols.values():
                c.append(None)
            continue
        text, w, h = r["text"], num(r["width"]), num(r["height"])
        cols["text_empty"].append(int(not text.strip()))
        cols["ctc_slack"].append(frames(w, h, geometry) - len(text) - repeats(text))
        cols["unknown_chars"].append(sum(c not in charset for c in text) if charset else None)
        cols["aspect"].append(h / w if w else 0.0)
        cols["edge_space"].append(int(text != text.strip()) if text.strip() else 0)
        cols["text_invisible"].append(int(has_invisible(text)))
    return cols


def file_expectations(p) -> list:
    import great_expectations as gx

    e = gx.expectations
    suite = [("empty_text", e.ExpectColumnValuesToBeInSet(column="text_empty", value_set=[0])),
             ("too_long", e.ExpectColumnValuesToBeBetween(column="ctc_slack", min_value=0)),
             ("aspect", e.ExpectColumnValuesToBeBetween(column="aspect",
                                                        max_value=p.max_aspect)),
             ("whitespace", e.ExpectColumnValuesToBeInSet(column="edge_space", value_set=[0])),
             ("invisible_text", e.ExpectColumnValuesToBeInSet(column="text_invisible",
                                                              value_set=[0]))]
    if p.charset:
        suite.append(("unknown_char", e.ExpectColumnValuesToBeBetween(column="unknown_chars",
                                                                      max_value=0)))
    return suite


def reason(check, row, p, geometry) -> str:
    text = row["text"]
    w, h = int(row["width"] or 0), int(row["height"] or 0)
    if check == "empty_text":
        return "empty transcript"
    if check == "too_long":
        t = frames(w, h, geometry)
        return (f"transcript {clip(text)} needs {len(text) + repeats(text)} CTC frames "
                f"({len(text)} characters + {repeats(text)} adjacent repeats) but the {w}x{h} "
                f"line gives {t} at prepare.height {geometry[0]} (prepare.width {geometry[1]}, "
                f"stride {STRIDE})")
    if check == "unknown_char":
        return outside(text, p.charset)
    if check == "aspect":
        return (f"{w}x{h}: taller than wide by {h / w:.2f} > validate.max_aspect "
                f"({p.max_aspect}); is it rotated or not a text line?")
    if check == "whitespace":
        return f"leading or trailing whitespace in {clip(text)} (kept as written)"
    if check == "invisible_text":
        bad = [c for c in text if invisible(c)]
        what = ("holds only control or zero-width characters" if only_invisible(text) else
                f"holds {len(bad)} control, format or separator character(s) ({listed(bad)}) "
                f"among its text")
        return (f"transcript {clip(text)} {what}: fix the transcript"
                + ("" if p.charset else ", or set validate.charset to block such lines"))
    return row["error"] or check  # an annotation error: ingest's message
