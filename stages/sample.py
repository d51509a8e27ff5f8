"""Write the task's built-in sample dataset to data/sample/ (byte-identical on every machine)."""
import shutil
from pathlib import Path

import click

from stages.lib.params import params_option

OUT = Path("data/sample")


@click.command()
@params_option
def main(params_path):
    """Write the selected task's built-in sample dataset to data/sample/.

    Reads `task` and `sample.per_class` (0 = all images) from the params file. For
    classification: scikit-learn's 1,797 digits as <digit>/<index>.pgm.
    """
    from tqdm import tqdm

    from stages.tasks import open_stage

    task, params, _ = open_stage("sample", params_path)  # first: a bad value, or a misfit
    tmp = OUT.with_name(OUT.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    n = 0
    # a count on a terminal (the synthesized samples take minutes); nothing in a log
    with tqdm(desc="sample", unit="file", disable=None) as bar:
        for rel, data in task.sample(params["sample"]):
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            n += 1
            bar.update()
    shutil.rmtree(OUT, ignore_errors=True)
    tmp.rename(OUT)  # the folder appears whole or not at all
    click.echo(f"sample: wrote {n} files to {OUT}/")


if __name__ == "__main__":
    main()
