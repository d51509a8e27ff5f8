"""The page template of `dvc plots show` / `dvc plots diff` with vega, vega-lite and vega-embed
inlined from the installed, pinned `vl-convert-python` (`vl_convert.javascript_bundle()`), so the
plots draw with no network and the scripts are never copied into the repository.

The report stage writes it as its DVC out reports/plots_page.html, which the project's
`.dvc/config` names (`plots.html_template = ../reports/plots_page.html`, relative to .dvc/): after
`dvc repro` or `dvc pull` a fresh clone has it with no extra step. `python -m tools.plots_template`
writes it too (no run needed), and `tools.doctor` says when it is missing or stale. The same
package version gives the same bytes.
"""
import click

OUT = "reports/plots_page.html"  # the report stage's out, which plots.html_template names
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
