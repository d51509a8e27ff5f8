"""The CTC-text family (ocr, speech): a model that emits CTC frames over a charset learnt from the
train split's transcripts. `CtcText` answers what both tasks answer the same way: the
transcript columns, the charset and its encoder, the CTC loss (ctc.py), export's agreement (the
same collapsed classes), predict's and serve's text rows and their --beam option. The helpers
below are the text checks both gates run; each task adds the checks of its own input (OCR: the
line's aspect; speech: the audio gate) and the CTC frame count its input gives (line pixels,
clip seconds).
"""
from stages.lib.show import clip, outside, repeats
from stages.tasks.base import BLOCKING, WARNING, Task

# the text checks both tasks describe alike
EMPTY_TEXT = (BLOCKING, "an empty (or all-whitespace) transcript")
UNKNOWN_CHAR = (BLOCKING, "a character outside validate.charset (when it is given)")
WHITESPACE = (WARNING, "leading or trailing whitespace in a transcript")


class CtcText(Task):
    annotation_fields = ("text", "text_sha256")
    annotation_errors = ("unlabelled", "missing", "duplicate_entry", "bad_list")
    meta_keys = ("charset", "blank", "max_len")
    target_dtype = "int32"  # per item: [length, code, ..., 0 padding]
    val_metric = "cer"
    val_higher_is_better = False
    output_names = ("logits",)  # N x T x (1 + len(charset)); class 0 is the CTC blank
    agreement_name = "text_agreement"
    headline_metric = "cer"
    item = "line"  # what one transcript belongs to, in init's words (a line, a clip)

    def data_summary(self, rows):
        texts = [r["text"] for r in rows]
        chars = {c for t in texts for c in t}
        return (f"{len(texts)} transcripts, {len(chars)} distinct characters, up to "
                f"{max(map(len, texts), default=0)} per {self.item}")

    def annotation_key(self, row):
        return row["text"]

    def prepare_meta(self, splits):
        from stages.lib.io import StageError

        charset = sorted({c for r in splits["train"] for c in r["text"]})
        if not charset:
            raise StageError("prepare: the training split holds no characters")
        return {"charset": charset, "blank": 0,
                "max_len": max(len(r["text"]) for rows in splits.values() for r in rows)}

    def encoder(self, meta):
        from stages.lib.io import StageError
        from stages.tasks.common.ctc import encode

        index = {c: i + 1 for i, c in enumerate(meta["charset"])}
        if len(index) != len(meta["charset"]):
            raise StageError("prepare: the charset repeats a character")
        return lambda row, pixels: encode(row["text"], index, meta["max_len"])

    def head(self, model):
        return "head"  # the linear layer to 1 + len(charset) per frame

    def loss(self, outputs, targets, p):
        """CTC with zero_infinity=True, deliberately: an item CTC cannot align (more labels than
        frames allow) has an infinite loss, and one such item would make the batch's loss and
        gradients inf. zero_infinity zeroes that item's loss and gradient instead, which hides
        it: validate's too_long check is what guarantees no such item reaches training. NaN
        (a poisoned input) is not hidden: the loss stays NaN and train stops loudly."""
        from stages.tasks.common.ctc import ctc_loss

        return ctc_loss(outputs, targets, "mean")

    def val_sums(self, outputs, targets):
        from stages.tasks.common.ctc import ctc_loss, val_cer_sum

        outputs = outputs.float()
        return ctc_loss(outputs, targets, "sum").item(), val_cer_sum(outputs, targets)

    def agree(self, reference, candidate):
        import numpy as np

        from stages.tasks.common.ctc import collapse

        return np.array([collapse(a) == collapse(b) for a, b in
                         zip(reference.argmax(-1), candidate.argmax(-1), strict=True)])

    def describe(self, outputs_row):
        from stages.tasks.common.ctc import collapse

        return f"decoded classes {collapse(outputs_row.argmax(-1))}"

    prediction_fields = {"text": "string", "confidence": "number", "uncertain": "boolean"}

    def empty_prediction(self):
        return {"text": "", "confidence": None, "uncertain": None}

    # predict/serve --beam K: CTC prefix beam search of width K; --min-confidence C: a line
    # whose confidence is below C is answered with uncertain: true
    decode_options = ("beam", "min_confidence")

    def decode(self, outputs, meta, k):
        """Greedy (the decoder evaluate and export use), or a prefix beam search of width
        meta["beam"] when predict/serve got --beam (stages/tasks/common/ctc.py: beam);
        uncertain: the confidence is below meta["min_confidence"] (--min-confidence; 0 when
        not given: never)."""
        from stages.tasks.common.ctc import beam

        width = meta.get("beam") or 1
        floor = meta.get("min_confidence") or 0.0
        return [{"text": t, "confidence": c, "uncertain": c < floor}
                for t, c in beam(outputs, meta["charset"], width)]


# ---- the text checks (each task's checks.py)

def text_columns(rows, ok, names: tuple, values) -> dict:
    """validate's check columns {name: [value per row]} in the order of `names`: values(row)
    gives a usable row's {name: value}; a row that is not usable has None in every column."""
    cols = {name: [] for name in names}
    for r, good in zip(rows, ok, strict=True):
        found = values(r) if good else {}
        for name, col in cols.items():
            col.append(found.get(name))
    return cols


def text_values(text: str, charset: set) -> dict:
    """The columns both gates compute alike for one transcript."""
    return {"text_empty": int(not text.strip()),
            "unknown_chars": sum(c not in charset for c in text) if charset else None,
            "edge_space": int(text != text.strip()) if text.strip() else 0}


def text_expectations(p, suite: list) -> list:
    """[(check, expectation)] of suite [(check, column, bounds)]: bounds None for "every value
    is 0", else the {min_value, max_value} a value must lie within; unknown_char comes last,
    when validate.charset is given."""
    import great_expectations as gx

    e = gx.expectations
    out = [(check, e.ExpectColumnValuesToBeInSet(column=column, value_set=[0]) if bounds is None
            else e.ExpectColumnValuesToBeBetween(column=column, **bounds))
           for check, column, bounds in suite]
    if p.charset:
        out.append(("unknown_char", e.ExpectColumnValuesToBeBetween(column="unknown_chars",
                                                                    max_value=0)))
    return out


def needs(text: str) -> str:
    """The too_long reason's first half: the frames a transcript needs."""
    return (f"transcript {clip(text)} needs {len(text) + repeats(text)} CTC frames "
            f"({len(text)} characters + {repeats(text)} adjacent repeats)")


def text_reason(check: str, row: dict, p) -> str:
    """The reason of a check both gates word alike: unknown_char, whitespace, or an annotation
    error (ingest's message)."""
    if check == "unknown_char":
        return outside(row["text"], p.charset)
    if check == "whitespace":
        return f"leading or trailing whitespace in {clip(row['text'])} (kept as written)"
    return row["error"] or check
