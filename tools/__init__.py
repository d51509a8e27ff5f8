"""Tools around the pipeline, not DVC stages: each is run as `python -m tools.<name>`."""
