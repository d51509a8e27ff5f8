"""The run report: one self-contained page with everything a reviewer asks about a run.

`reports/run.html` (the last DVC stage, `python -m stages.report`) is built only from the run's
own outs: provenance (data, params, code and environment hashes; the params that differ from the
defaults highlighted), the data (class counts per split, the validation summary, a link to
reports/validation.html), training curves (every dvclive tsv under plots/train/plots/metrics/
becomes a curve, so a new metric appears without code changes), the task's sections (for
classification: the evaluation's headline, per-class table, confusion matrix and bad cases) and
the export (parity numbers, ONNX size and metadata).

The page is a DVC out, so it is deterministic: no timestamp, hostname, absolute path or git
commit in it (a commit is made after the run, so it cannot be an input of the run; the hashes
name the code, data and params instead). Two things change without the run changing: the git
commit and the list of experiments. `--experiments` writes a second page for humans,
reports/experiments.html (not tracked), that adds both: the commit with its dirty flag and the
table of `dvc exp show --json` with the best value per headline metric marked.

Self-contained: images are inline data: URIs (matplotlib Agg PNGs without a Software/date
chunk, so the same numbers give the same bytes), the stylesheet (style.css, package data) is
inline, there is no script and no external URL, so the page renders offline and in any sandbox.

Modules: facts (every input, read once), charts (the curve chart), html (markup helpers, the
stylesheet, the page skeleton), sections (the generic sections), page (assembly, with the task's
sections from stages/tasks/<task>/report.py), validation (validate's reports/validation.html),
__main__ (the command). Importing this package imports nothing heavy.
"""
