"""OCR pieces without a pipeline run (issue 20): the sample's bytes, CER/WER against hand-
computed edit distances, the greedy decoder, the CTC length rule against torch's own loss,
and how a line is fitted to the model input."""
import hashlib
import io

import numpy as np
import pytest
from PIL import Image

from stages.tasks.common.ctc import collapse, greedy, scores
from stages.tasks.ocr.checks import frames, repeats
from stages.tasks.ocr.metrics import char_errors
from stages.tasks.ocr.sample import CJK_CHARS, text_lines

# sha256 over (path, NUL, bytes) of the first 40 sample lines and their list: the bytes every
# machine must write (no font, no FreeType, no zlib; see stages/tasks/ocr/sample.py)
SAMPLE_40 = "74c6eda914459a2730bdddf9fead29ab80e81f61e78b097a0178bb9998736018"


def test_sample_bytes_are_fixed_and_cover_every_script():
    h = hashlib.sha256()
    files = list(text_lines(40))
    for rel, data in files:
        h.update(rel.encode() + b"\0" + data)
    assert h.hexdigest() == SAMPLE_40
    texts = [line.split("\t", 1)[1] for line in files[-1][1].decode("utf-8").splitlines()]
    assert len(texts) == 40
    joined = "".join(texts)
    assert any(c in CJK_CHARS for c in joined) and any(c.isdigit() for c in joined)
    assert any(c.isupper() for c in joined) and any(c in ".,:;!?'" for c in joined)
    widths = {Image.open(io.BytesIO(data)).size[0] for _, data in files[:-1]}
    assert len(widths) > 20  # varying widths; height fixed
    assert {Image.open(io.BytesIO(data)).size[1] for _, data in files[:-1]} == {32}


def levenshtein(a, b) -> int:
    """The textbook dynamic programme, written out by hand."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def test_cer_and_wer_match_hand_computed_edit_distances():
    truths = ["hello world", "中山 7", "abc", "12,500 kg", "same"]
    preds = ["helo world!", "中 7", "", "12.500 kg", "same"]
    # by hand: 2 (drop l, add !), 1 (drop 山), 3 (all deleted), 1 (, -> .), 0
    assert [levenshtein(t, q) for t, q in zip(truths, preds, strict=True)] == [2, 1, 3, 1, 0]
    got = scores(truths, preds)
    assert got["cer"] == pytest.approx(7 / sum(map(len, truths)))
    words = [(t.split(), q.split()) for t, q in zip(truths, preds, strict=True)]
    word_errors = sum(levenshtein(t, q) for t, q in words)
    assert word_errors == 2 + 1 + 1 + 1 + 0
    assert got["wer"] == pytest.approx(word_errors / sum(len(t) for t, _ in words))
    assert got["line_accuracy"] == pytest.approx(1 / 5)
    wrong, pairs = char_errors("12,500", "12.500")
    assert wrong == {2} and pairs == [(",", ".")]


def test_greedy_decoding_merges_repeats_and_drops_blanks():
    charset = ["a", "b", "中"]
    path = [1, 1, 0, 1, 2, 2, 0, 0, 3]  # a a - a b b - - 中  ->  "aab中"
    logits = np.full((1, len(path), 4), -5.0, dtype=np.float32)
    for t, c in enumerate(path):
        logits[0, t, c] = 5.0 if c else 3.0
    (text, confidence), = greedy(logits, charset)
    assert text == "aab中" and collapse(path) == [1, 1, 2, 3]
    # P(text | line): the best path's probability is nearly all of it here
    p_letter = np.exp(5) / (np.exp(5) + 3 * np.exp(-5))
    p_blank = np.exp(3) / (np.exp(3) + 3 * np.exp(-5))
    assert confidence == pytest.approx(p_letter ** 6 * p_blank ** 3, rel=1e-3)
    empty = np.zeros((1, 4, 4), dtype=np.float32)
    empty[0, :, 0] = 4.0
    assert greedy(empty, charset)[0][0] == ""


@pytest.mark.parametrize("text", ["abc", "hello", "aaaa", "book keeper"])
def test_ctc_rule_is_exactly_where_torch_ctc_loss_becomes_infinite(text):
    import torch
    import torch.nn.functional as F

    index = {c: i + 1 for i, c in enumerate(sorted(set(text)))}
    target = torch.tensor([[index[c] for c in text]])
    need = len(text) + repeats(text)
    for t, finite in ((need, True), (need - 1, False)):
        logp = torch.zeros(t, 1, len(index) + 1).log_softmax(-1)
        loss = F.ctc_loss(logp, target, torch.tensor([t]), torch.tensor([len(text)]))
        assert torch.isfinite(loss).item() == finite, (text, t)
    assert frames(width=need * 4, height=32, geometry=(32, 192)) == need


def test_a_line_is_scaled_to_the_height_and_padded_with_its_paper(tmp_path):
    from stages.lib.modality.imagecore import load_image

    pixels = np.full((50, 100), 200, dtype=np.uint8)
    pixels[20:30, 10:90] = 20  # ink
    Image.fromarray(pixels).save(tmp_path / "line.png")
    out = load_image(tmp_path / "line.png", [32, 192], 1)
    assert out.shape == (32, 192, 1)
    assert (out[:, 64:] == 200).all()  # 100 x 50 -> 64 x 32, then paper to 192
    assert out[:, :64].min() < 60
    wide = load_image(tmp_path / "line.png", [32, 48], 1)  # wider than 48: squeezed
    assert wide.shape == (32, 48, 1) and wide.min() < 60
