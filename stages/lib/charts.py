"""The one PNG writer of the pipeline: evaluate's plots and the run report's charts.

matplotlib stamps its version (`Software`) into a PNG; without it, and with no date chunk
(Agg writes none), the same figure gives the same bytes on every run, as DVC outs must.
matplotlib is imported by the caller that builds the figure, never here.
"""
import io


def png_bytes(fig) -> bytes:
    """A matplotlib Figure as PNG bytes, with no matplotlib version or timestamp in them."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()
