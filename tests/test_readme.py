import re

from tests.conftest import ROOT


def setup_commands():
    readme = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(python3\.11 -m venv[^\n]*)\n```", readme)


def test_readme_has_two_setup_commands_and_ci_runs_the_test_one():
    commands = setup_commands()
    assert len(commands) == 2
    assert commands[0].endswith("&& dvc repro")
    assert commands[1].endswith("&& python -m pytest")
    assert commands[1] in (ROOT / ".ci/run").read_text()
