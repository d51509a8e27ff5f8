"""Issue 17, item 5: verify --rev OLD works when credentials live in .dvc/config.local for a
remote that OLD's .dvc/config does not define yet."""
import pytest

from tests.conftest import ROOT, run_tool
from tools.project import copy_project, git

LOCAL = """['remote "s3"']
    access_key_id = AKIAEXAMPLE
    secret_access_key = secret
[core]
    remote = s3
"""


@pytest.mark.e2e
def test_verify_an_old_commit_with_credentials_in_config_local(tmp_path):
    project = copy_project(ROOT, tmp_path / "p")
    old = git(project, "rev-parse", "HEAD").strip()
    with open(project / ".dvc/config", "a") as f:
        f.write("['remote \"s3\"']\n    url = s3://bucket/store\n")
    git(project, "commit", "-qam", "S3 remote")
    (project / ".dvc/config.local").write_text(LOCAL)  # as docs/machines.md recommends
    before = (project / ".dvc/config.local").read_bytes()
    proc = run_tool("verify", "--rev", old, "--stages", "sample", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "config file error" not in proc.stdout + proc.stderr
    assert "bit-identical" in proc.stdout
    assert "verify: stage sample (" in proc.stderr  # item 9: progress while it runs
    assert (project / ".dvc/config.local").read_bytes() == before


def test_only_what_the_old_commit_can_use_is_copied(tmp_path):
    from configobj import ConfigObj

    from tools.verify import copy_local_config

    local = tmp_path / "config.local"
    local.write_text(LOCAL + "['remote \"nas\"']\n    url = /mnt/nas\n[cache]\n    type = copy\n")
    for committed, kept, dropped in (
            ("", ["remote \"nas\"", "cache", "core"], ["s3"]),
            ("['remote \"s3\"']\n    url = s3://b/p\n",
             ["remote \"s3\"", "remote \"nas\"", "cache", "core"], [])):
        clone = tmp_path / f"clone{len(committed)}"
        clone.mkdir()
        (clone / "config").write_text(committed)
        assert copy_local_config(local, clone) == dropped
        conf = ConfigObj(str(clone / "config.local"))
        assert sorted(conf) == sorted(kept)
        assert conf["core"].get("remote") == ("s3" if not dropped else None)
