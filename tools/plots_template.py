"""Write the offline page template of `dvc plots show` / `dvc plots diff`:
`python -m tools.plots_template`.

DVC's own page loads vega, vega-lite and vega-embed from a CDN, so offline every curve is blank.
The project's `.dvc/config` sets `plots.html_template = ../reports/plots_page.html` (DVC reads
it relative to `.dvc/`): the report stage's out, so `dvc repro` or `dvc pull` in a fresh clone
brings it with no extra step (stages/report/plotpage.py builds it from the pinned
vl-convert-python). This tool writes the configured file without a run (`tools.init` does it
when it is missing, and `tools.doctor` says when it is missing or stale).
"""
from pathlib import Path

import click

from stages.report.plotpage import page

CONFIG_NAME = "../reports/plots_page.html"  # plots.html_template in .dvc/config


def template_path(root=".") -> Path | None:
    """Where `dvc plots` reads its page template: plots.html_template of the project's DVC
    config (relative paths are under .dvc/), or None when none is set."""
    from dvc.config import Config

    dvc_dir = Path(root).resolve() / ".dvc"
    value = Config(dvc_dir=str(dvc_dir), local_dvc_dir=str(dvc_dir)).get(
        "plots", {}).get("html_template")
    if not value:
        return None
    return Path(value) if Path(value).is_absolute() else (dvc_dir / value).resolve()


def write(path: Path) -> bool:
    """Write the template at path (temp file, then rename); False when it was already there
    with the same bytes."""
    import os

    data = page().encode()
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


def status(root=".") -> tuple[Path | None, str]:
    """(template path, "ok" | "missing" | "stale" | "unset") for tools.doctor."""
    path = template_path(root)
    if path is None:
        return None, "unset"
    if not path.is_file():
        return path, "missing"
    return path, "ok" if path.read_bytes() == page().encode() else "stale"


def shown(path: Path, root=".") -> str:
    """path relative to the project root when it is inside it."""
    try:
        return path.relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return str(path)


def ensure(root=".") -> Path | None:
    """Write the configured template when it is missing (tools.init); the path written, or
    None (no setting, or the file is there)."""
    path = template_path(root)
    if path is None or path.is_file():
        return None
    write(path)
    return path


def findings(root=".") -> list[tuple[str, str, str]]:
    """tools.doctor's lines: [(level, message, fix)] for the page template."""
    path, state = status(root)
    fix = "python -m tools.plots_template  (or dvc repro / dvc pull: the report stage's out)"
    if state == "unset":
        return [("WARN", "no plots.html_template in .dvc/config: `dvc plots show` loads vega "
                         "from a CDN and draws nothing offline",
                 f"dvc config plots.html_template {CONFIG_NAME} && {fix.split('  ')[0]}")]
    if state == "missing":
        return [("WARN", f"{shown(path, root)} (.dvc/config's "
                         f"plots.html_template) is missing: `dvc plots show` fails with \"HTML "
                         f"template has to contain '{{plot_divs}}'\"", fix)]
    if state == "stale":
        return [("WARN", f"{path.name} (plots.html_template) was written by another "
                         f"vl-convert-python than the installed one", fix)]
    return [("OK", f"plots.html_template {path.name}: vega inlined, draws offline", "")]


@click.command()
def main():
    """Write the page template that `dvc plots show` / `dvc plots diff` use (the file named by
    plots.html_template in .dvc/config) with vega, vega-lite and vega-embed inlined from the
    installed vl-convert-python, so the plots draw with no network."""
    path = template_path()
    if path is None:
        raise click.ClickException(
            f"no plots.html_template in .dvc/config: set it first with "
            f"`dvc config plots.html_template {CONFIG_NAME}` (run from the project root)")
    changed = write(path)
    click.echo(f"plots template: {shown(path)} ({path.stat().st_size / 1024:,.0f} KiB)"
               + ("" if changed else ", already up to date"))


if __name__ == "__main__":
    main()
