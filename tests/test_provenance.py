import json
import subprocess

from stages.lib.params import Train
from stages.lib.model.provenance import git_state, params_hash, run_record, write_run_record


def test_params_hash_is_stable_and_sensitive():
    assert params_hash(Train()) == params_hash(Train())
    assert params_hash(Train()) != params_hash(Train(lr=0.1))
    assert params_hash({"a": 1, "b": 2}) == params_hash({"b": 2, "a": 1})


def test_run_record_names_commit_dirty_flag_and_lock_hash(in_tmp):
    assert git_state()["git_commit"] == ""
    subprocess.run(["git", "init", "-q"], check=True)
    (in_tmp / "requirements.lock").write_text("x==1\n")
    subprocess.run(["git", "add", "-A"], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"],
                   check=True)
    record = run_record("train", Train())
    assert len(record["git_commit"]) == 40 and record["git_dirty"] is False
    assert record["requirements_lock_sha256"] and record["params"]["lr"] == Train().lr
    (in_tmp / "requirements.lock").write_text("x==2\n")
    assert run_record("train", Train())["git_dirty"] is True
    path = write_run_record("train", record)
    assert json.loads(path.read_text())["stage"] == "train"
