"""Pipeline stages: each module is one click command run by DVC as `python -m stages.<name>`."""
