"""Write the offline page template of `dvc plots show` / `dvc plots diff`:
`python -m tools.plots_template`.

DVC's own page loads vega, vega-lite and vega-embed from a CDN, so offline every curve is blank.
The project's `.dvc/config` sets `plots.html_template = offline_plots.html` (DVC reads it
relative to `.dvc/`); this tool writes that file with the three libraries inlined, taken from
the installed, pinned `vl-convert-python` package (`vl_convert.javascript_bundle()`: Vega 6,
Vega-Lite 5.21 and vega-embed, ~0.9 MB), so the scripts are never copied into the repository.
The file is not tracked (`.dvc/.gitignore`): a fresh clone writes it with this command
(`tools.init` does it too, and `tools.doctor` says when it is missing or stale).

The same package version gives the same bytes, so running it again changes nothing.
"""
from pathlib import Path

import click

CONFIG_NAME = "offline_plots.html"  # the value of plots.html_template in .dvc/config
VEGA_LITE = "5.21"  # DVC's templates are Vega-Lite v5 specs
PLACEHOLDERS = ("{plot_divs}", "{scripts}", "{refresh_tag}")
PAGE = """<!DOCTYPE html>
<html>
<head>
    <meta charset="utf-8">
    {refresh_tag}
    <title>DVC Plot</title>
    <!-- written by `python -m tools.plots_template` from vl-convert-python VERSION:
         vega, vega-lite VEGALITE and vega-embed inlined, so the page needs no network -->
    <script>
BUNDLE
    </script>
    <style>
        table {
            border-spacing: 15px;
        }
    </style>
</head>
<body>
    {plot_divs}
</body>
</html>
"""


def template_path(root=".") -> Path | None:
    """Where `dvc plots` reads its page template: plots.html_template of the project's DVC
    config (relative paths are under .dvc/), or None when none is set."""
    from dvc.config import Config

    dvc_dir = Path(root).resolve() / ".dvc"
    value = Config(dvc_dir=str(dvc_dir), local_dvc_dir=str(dvc_dir)).get(
        "plots", {}).get("html_template")
    if not value:
        return None
    return Path(value) if Path(value).is_absolute() else dvc_dir / value


def page() -> str:
    """The template's text: DVC's page with the three libraries inlined."""
    from importlib.metadata import version

    import vl_convert

    bundle = vl_convert.javascript_bundle(vl_version=VEGA_LITE)
    for mark in PLACEHOLDERS:  # DVC fills these by plain text replacement
        if mark in bundle:
            raise click.ClickException(f"vl-convert-python's bundle contains {mark}: DVC "
                                       f"would fill it; pin another version in requirements.lock")
    bundle = bundle.replace("</script", "<\\/script")  # cannot end the <script> element early
    return (PAGE.replace("VERSION", version("vl-convert-python"))
            .replace("VEGALITE", VEGA_LITE).replace("BUNDLE", bundle))


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
    click.echo(f"plots template: {path} ({path.stat().st_size / 1024:,.0f} KiB)"
               + ("" if changed else ", already up to date"))


if __name__ == "__main__":
    main()
