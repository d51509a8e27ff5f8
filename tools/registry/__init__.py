"""The model registry's thin layer over GTO and DVC: `python -m tools.registry`.

GTO keeps versions and stages as annotated git tags (`ocr@v1.2.0`, `ocr#prod#1`) of the
artifacts dvc.yaml declares; `dvc artifacts get` fetches one artifact's bytes without a clone.
This package adds only what they do not check or show (docs/registry.md):

- register.py: refuse a commit whose dvc.lock, remote or working tree is not in order, then
  register it with a tag message holding the run's facts (metrics, data and split hashes,
  kernel profile, params that differ from the task's recipe);
- show.py: every artifact's versions with stage, date, headline metric and data version;
- fetch.py: one version's bytes, their md5 checked against the tagged commit's dvc.lock
  (DVC does not re-hash what it downloads, whatever the remote's `verify` says);
- models.py: `--model NAME@v1.2.0`, `NAME#prod`, `NAME` for tools.predict and tools.serve:
  resolved with dvc.api and GTO, fetched once into a cache keyed by md5, checked before every
  load.

Nothing here imports torch; gto and dvc load only when a command runs.
"""
import re

import click

USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")


def public(text) -> str:
    """text with the userinfo of every URL in it removed (`https://host/repo.git`)."""
    return USERINFO.sub(r"\1", str(text))


class RegistryError(click.ClickException):
    """What the registry refuses, and the fix; click prints `Error: ...`, exit code 1. A
    URL's userinfo (user:token@) never reaches the message."""

    def __init__(self, message: str):
        super().__init__(public(message))
