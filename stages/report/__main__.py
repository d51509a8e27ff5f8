"""`python -m stages.report`: write the run report (see the package's docstring)."""
from pathlib import Path

import click

from stages.lib.io import StageError, write_bytes
from stages.lib.params import params_option
from stages.report.facts import EXPERIMENTS_OUT, OUT


@click.command()
@params_option
@click.option("--experiments", "with_experiments", is_flag=True,
              help="Also show the git commit and the table of `dvc exp show --json` (best value "
                   "per headline metric marked). The page then changes with every commit and "
                   "experiment, so it goes to reports/experiments.html (not tracked), never to "
                   "the DVC out reports/run.html.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Where to write the page. Default: reports/run.html, or "
                   "reports/experiments.html with --experiments.")
def main(params_path, with_experiments, out_path):
    """Write the run report: one self-contained HTML page (no network needed to view it).

    Reads the run's outs (data/manifest.csv, data/quarantine.csv, metrics/*.json,
    plots/train/plots/metrics/**.tsv, plots/eval/ (the task's evaluation files),
    models/model.onnx), every section of the params file and requirements.lock. Also writes
    metrics/summary.json, the run's one DVC metric, and reports/plots_page.html, the offline
    page template of `dvc plots show` (not with --experiments).
    """
    from stages.report.facts import dvc_exp_show, gather
    from stages.report.page import render
    from stages.tasks import open_stage

    task, params, raw = open_stage("report", params_path)  # first: params that do not fit stop
    out = Path(out_path) if out_path else (EXPERIMENTS_OUT if with_experiments else OUT)
    if with_experiments and out.resolve() == OUT.resolve():
        raise StageError(f"--experiments cannot write {OUT}: it is a DVC out and must not change "
                         "when experiments or commits are added. Use --out "
                         f"{EXPERIMENTS_OUT} (the default).")
    git = shown = measured = None
    if with_experiments:
        from stages.lib.data.changes import dataset_version
        from stages.lib.model.provenance import LOG_DIR, git_state, registry_state
        from stages.report.facts import read_json

        # git facts (the commit, its registered versions and stages, the dataset's registered
        # version): this untracked page only, never the DVC out run.html
        git = {**git_state(), "registry": registry_state(),
               "dataset": dataset_version(params["data"].source)}
        shown = dvc_exp_show()
        record = LOG_DIR / "export.json"  # this machine's run record: untracked, like the page
        measured = read_json(record).get("metrics") if record.is_file() else None
    page = render(gather(params_path, out, task, git=git, experiments=shown, measured=measured,
                         raw=raw, hidden=others_keys(task)), task)
    write_bytes(out, page.encode("utf-8"))
    click.echo(f"report: {out} ({len(page) / 1024:,.0f} KiB)")
    if not with_experiments:  # the DVC run: its one metric file, the columns of `dvc exp show`
        from stages.lib.io import json_bytes
        from stages.report.summary import SUMMARY, summary

        write_bytes(SUMMARY, json_bytes(summary(task)))
        click.echo(f"report: {SUMMARY}")
        from stages.report.plotpage import OUT as PLOTS_PAGE, page as plots_page

        write_bytes(Path(PLOTS_PAGE), plots_page().encode())  # plots.html_template's page
        click.echo(f"report: {PLOTS_PAGE} (the offline page of `dvc plots show`)")


def others_keys(task) -> set:
    """The params only other tasks or other modalities read (their task_keys and ONLY_KEYS):
    the page leaves them out at their defaults (an audio run lists no image formats)."""
    from stages.lib.modality import MODALITIES, get as modality
    from stages.tasks import available, get

    keys = {k for name in available() if name != task.name for k in get(name).task_keys}
    keys |= {k for name in MODALITIES if name != task.modality_name
             for k in modality(name).ONLY_KEYS}
    return keys - set(task.task_keys) - set(task.modality.ONLY_KEYS)


if __name__ == "__main__":
    main()
