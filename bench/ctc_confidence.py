"""Which line confidence ranks right CTC lines above wrong ones: the AUROC of line correctness
and the mean confidence of right and wrong lines, for each candidate confidence, on a trained
project's test split (models/model.pt, data/processed, data/split/test.csv).

    python -m bench.ctc_confidence [--project DIR] [--clips LIST | --festival DIR]

Run in (or with --project) a project where `dvc repro evaluate` ran with task speech or ocr;
--clips: a speech model scored on other clips (a path<TAB>transcript list), e.g. another
synthesizer's.
The candidates, from each line's greedy best path (probabilities p[t, c], the best class b_t
per frame): `mean_nonblank`, the mean of p[t, b_t] over the frames whose best class is not
blank (the confidence before issue 55); `min_frame`, the minimum of p[t, b_t] over every frame
(what predict and serve answer now); `min_char`, over each emitted character's run of frames
the largest p[t, b_t], then the minimum of those; `path`, the product of p[t, b_t] (the best
path's probability); `geo_mean`, its geometric mean per frame; `beam8`, P(text | line) summed
by a prefix beam search of width 8 (the beam's text scored for its correctness); `text_prob`,
P(greedy text | line), the CTC forward sum over every path of the greedy text.
"""
import os
from pathlib import Path

import click
import numpy as np

FLOOR = 0.5  # a --min-confidence: the share of wrong and of right lines it flags


def candidates(logits: np.ndarray, charset) -> dict:
    """{name: [confidence per line]} and the greedy texts under "text"."""
    from stages.tasks.common.ctc import BLANK, beam, collapse, log_softmax, softmax, text_logprob

    probs = softmax(logits)
    out = {k: [] for k in ("mean_nonblank", "min_frame", "min_char", "path", "geo_mean",
                           "text_prob")}
    texts = []
    for p, logp in zip(probs, log_softmax(logits), strict=True):
        out["text_prob"].append(float(np.exp(text_logprob(logp, collapse(p.argmax(-1))))))
        best, top = p.argmax(-1), p.max(-1)
        steps = best != BLANK
        texts.append("".join(charset[c - 1] for i, c in enumerate(best.tolist())
                             if c != BLANK and (i == 0 or best[i - 1] != c)))
        out["mean_nonblank"].append(float(top[steps].mean() if steps.any() else top.mean()))
        out["min_frame"].append(float(top.min()))
        runs = []
        for i, c in enumerate(best.tolist()):
            if c != BLANK and (i == 0 or best[i - 1] != c):
                runs.append(top[i])
            elif c != BLANK:
                runs[-1] = max(runs[-1], top[i])
        out["min_char"].append(float(min(runs)) if runs else float(top.min()))
        out["path"].append(float(np.exp(np.log(top).sum())))
        out["geo_mean"].append(float(np.exp(np.log(top).mean())))
    beamed = beam(logits, charset, 8)
    return {**out, "text": texts, "beam8": [c for _, c in beamed],
            "beam_text": [t for t, _ in beamed]}


def clip_inputs(listing: Path, meta: dict):
    """(normalised inputs, transcripts) of a path<TAB>transcript list of sound files (paths
    relative to the list), featurised as predict does (speech models)."""
    from stages.lib.modality.audiocore import features, normalize, spec_of

    spec = spec_of(meta["image_size"])
    rows = [line.split("\t") for line in listing.read_text().splitlines() if line.strip()]
    stored = np.stack([features(listing.parent / path, spec)[0] for path, _ in rows])
    return normalize(stored, meta["mean"], meta["std"]), [text.strip() for _, text in rows]


FESTIVAL_VOICES = ("kal_diphone", "ked_diphone", "cmu_us_slt_arctic_hts")
DIGITS = "zero one two three four five six seven eight nine".split()


def festival_clips(folder: Path, n: int = 150, seed: int = 55) -> Path:
    """n clips of 2 to 5 spoken digits by Festival's three English voices (Debian's festival,
    festvox-kallpc16k, festvox-kdlpc16k, festvox-us-slt-hts), in turn, at 16 kHz, the digits
    from Python's random seeded by seed: folder/clips.tsv (path<TAB>transcript), written once."""
    import random
    import subprocess

    listing = folder / "clips.tsv"
    if listing.exists():
        return listing
    folder.mkdir(parents=True, exist_ok=True)
    rng, rows = random.Random(seed), []
    for i in range(n):
        voice = FESTIVAL_VOICES[i % len(FESTIVAL_VOICES)]
        text = " ".join(rng.choice(DIGITS) for _ in range(rng.randint(2, 5)))
        name = f"f{i:03d}_{voice}.wav"
        subprocess.run(["text2wave", "-eval", f"(voice_{voice})", "-F", "16000", "-o",
                        str(folder / name)], input=text.encode(), check=True,
                       capture_output=True)
        rows.append(f"{name}\t{text}\n")
    listing.write_text("".join(rows))
    return listing


@click.command()
@click.option("--project", type=click.Path(exists=True, file_okay=False), default=".")
@click.option("--clips", "listing", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Score these clips (path<TAB>transcript per line) instead of the test split.")
@click.option("--festival", type=click.Path(file_okay=False), default=None,
              help="Score 150 digit strings spoken by Festival's 3 English voices, synthesized "
                   "into this folder first (festival_clips).")
def main(project, listing, festival):
    if festival:
        listing = festival_clips(Path(festival).resolve())
    listing = Path(listing).resolve() if listing else None
    os.chdir(project)
    from stages.lib.data.shards import load_test
    from stages.lib.io import read_csv
    from stages.lib.model.models import predict_outputs
    from stages.tasks import load_model
    from stages.tasks.common.ctc import confidence_scores

    model, meta = load_model(Path("models/model.pt"))
    if listing is None:
        x, _, paths = load_test()
        truth = {r["path"]: r["text"] for r in read_csv(Path("data/split/test.csv"))}
        truths = [truth[s] for s in paths]
    else:
        x, truths = clip_inputs(listing, meta)
    outputs = predict_outputs(model, x, 64)
    found = candidates(outputs, meta["charset"])
    right = [t == q for t, q in zip(truths, found["text"], strict=True)]
    beam_right = [t == q for t, q in zip(truths, found["beam_text"], strict=True)]
    print(f"{len(right)} lines, {sum(right)} right (greedy), {sum(beam_right)} right (beam 8)")
    print(f"| confidence | AUROC of line correctness | mean, right lines | mean, wrong lines "
          f"| wrong lines under {FLOOR} | right lines under {FLOOR} |")
    print("|---|---|---|---|---|---|")
    for name, values in found.items():
        if name.endswith("text"):
            continue
        ok = np.array(beam_right if name == "beam8" else right)
        s = confidence_scores(values, ok)
        under = np.array(values) < FLOOR
        print(f"| `{name}` | {s['confidence_auroc']} | {s['confidence_right']} | "
              f"{s['confidence_wrong']} | {under[~ok].mean() if (~ok).any() else 0:.3f} | "
              f"{under[ok].mean() if ok.any() else 0:.3f} |")


if __name__ == "__main__":
    main()
