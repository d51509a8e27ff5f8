"""`python -m tools.registry register|show|get`: see tools/registry/__init__.py."""
import json
from pathlib import Path

import click


@click.group()
def main():
    """The model registry on top of GTO and DVC (docs/registry.md).

    Versions and stages are GTO's annotated git tags (NAME@v1.2.0, NAME#prod#1) of the
    artifacts dvc.yaml declares. Promote with `gto assign NAME --version v1.2.0 --stage prod`;
    push tags with `git push origin --tags`.
    """


@main.command()
@click.argument("name")
@click.argument("version")
def register(name, version):
    """Register the checked-out commit as NAME's VERSION (semver with a v: v1.2.0).

    Refuses, one line per problem with its fix, when the working tree has uncommitted
    changes, when dvc.lock does not match the outs (`dvc status` not clean) or when an out is
    not in the default DVC remote (`dvc push` first). Otherwise GTO writes the annotated tag
    NAME@VERSION, its message holding the headline metrics, the data version (dvc.lock's md5
    of data/manifest.csv), the split's hash, the kernel profile and the params that differ
    from the task's recipe. The tag is local: push it with `git push origin NAME@VERSION`.
    """
    from tools.registry.register import register as run

    tag = run(name, version)
    click.echo(f"registered {tag}; share it: git push origin {tag}")


@main.command()
@click.option("--repo", default=".", show_default=True,
              help="The git repository: a path or a URL that `git clone` takes.")
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list of rows (artifact, version, stages, date, headline, data, "
                   "commit) instead of the table.")
def show(repo, as_json):
    """Every artifact's versions, newest first: stage, registration date (UTC), headline
    metric, data version (md5 of data/manifest.csv) and commit, in one table."""
    from tools.registry.show import rows, table

    found = rows(repo)
    click.echo(json.dumps(found, indent=2) if as_json else table(found))


@main.command()
@click.argument("repo")
@click.argument("name")
@click.option("--rev", "version", default=None,
              help="The version to fetch (v1.2.0). Default: the latest, unless --stage.")
@click.option("--stage", default=None, help="Fetch the version this stage (prod) points at.")
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The file to write. Default: the artifact's file name (model.onnx) here.")
def get(repo, name, version, stage, out):
    """Fetch NAME from REPO (a path or git URL; no clone needed) like `dvc artifacts get`,
    but check the bytes' md5 against the tagged commit's dvc.lock first: a missing or
    corrupt object in the DVC remote is an error naming the artifact, and nothing is
    written. Remote credentials come from the environment (AWS_ACCESS_KEY_ID...)."""
    from tools.registry import RegistryError
    from tools.registry.fetch import get as fetch

    if version and stage:
        raise RegistryError("give --rev or --stage, not both")
    done = fetch(repo, name, version, stage, out or Path("model.onnx"))
    click.echo(f"{done['out']}: {name} at {done['rev'][:8]}, md5 {done['md5']} (checked)")


if __name__ == "__main__":
    main()
