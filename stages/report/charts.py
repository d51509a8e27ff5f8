"""The report's training-curve chart: one per metric, one line per series.

Written with the pipeline's one PNG writer (stages/lib/charts.py), so the same numbers give the
same bytes.
"""
from stages.lib.charts import png_bytes

COLOURS = {"train": "#2563eb", "val": "#ea580c", "test": "#16a34a"}


def curve_png(metric: str, series: dict[str, list[tuple[float, float]]]) -> bytes:
    """One chart per metric, one line per series: same numbers, same bytes."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.6, 3.0), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    values = []
    for name, points in sorted(series.items()):
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        values += ys
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.6, label=name,
                color=COLOURS.get(name.split("/")[0]))
    if "loss" in metric and values and min(values) > 0 and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.set_title(metric, fontsize=11)
    ax.set_xlabel("epoch (step)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.tick_params(labelsize=8)
    if ax.get_yscale() == "linear":
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
    if len(series) > 1 or metric not in series:
        ax.legend(fontsize=8, frameon=False)
    return png_bytes(fig)
