"""The one PNG writer of the pipeline: the same figure gives the same bytes on every run."""


def png_bytes(fig) -> bytes:
    """PNG without the matplotlib version or a timestamp in it: the same plot, the same bytes."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()
