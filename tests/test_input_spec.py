"""Each modality speaks its own language (issue 57): the input recipe is spelt once, in the
spec module; the audio code names no image; an audio project's old params form is refused in
one line naming the new keys."""
import html
import re
import subprocess

import pytest

from stages.lib.io import StageError
from tests.conftest import ROOT


def test_the_audio_code_speaks_no_image_vocabulary():
    """Names, messages and params of the audio modality and the audio and speech tasks."""
    paths = [*sorted((ROOT / "stages/lib/modality").glob("audio*")),
             ROOT / "stages/tasks/audio", ROOT / "stages/tasks/speech"]
    found = subprocess.run(["grep", "-rni", "image", *map(str, paths)], capture_output=True,
                           text=True).stdout.splitlines()
    assert found == [], "\n".join(found)


def test_the_input_recipe_is_spelt_once():
    """No key tuple of the stored recipe outside stages/lib/modality/spec.py."""
    tuple_of = re.compile(r"""["']image_size["']\s*,\s*["']channels["']""")
    spec = ROOT / "stages/lib/modality/spec.py"
    offenders = [f"{path.relative_to(ROOT)}:{n}"
                 for folder in ("stages", "tools") for path in sorted((ROOT / folder).rglob("*.py"))
                 if path != spec
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if tuple_of.search(line)]
    assert offenders == []


def test_an_old_style_audio_params_file_is_refused_in_one_line_naming_the_new_keys():
    from stages.lib.params import parse_all

    raw = {"task": "speech", "prepare": {"image_size": {"sample_rate": 16000, "frames": 321}}}
    with pytest.raises(StageError) as info:
        parse_all(raw, "params.yaml")
    message = str(info.value)
    assert "\n" not in message
    assert "prepare.audio" in message and "frames: 321" in message


def test_the_audio_spec_stores_what_meta_json_stored():
    """The stored recipe keeps its keys and order (the outs' bytes)."""
    from stages.lib.modality.audiospec import AudioSpec, problems

    spec = AudioSpec.of({"frames": 321})
    assert list(spec.to_meta()) == ["image_size", "channels", "mean", "std"]
    assert list(spec.settings) == ["sample_rate", "n_fft", "hop", "n_mels", "frames"]
    assert AudioSpec.from_meta(spec.to_meta()) == spec
    assert spec.shape == (40, 321, 1) and spec.seconds == 3.2
    assert problems({"hop": 600}) == ["prepare.audio: hop (600) must be at most n_fft (512)"]


def test_dvc_yaml_lists_each_modality_s_own_keys():
    """An audio project's dvc.yaml lists prepare.audio and validate.max_seconds where an image
    project's lists prepare.image_size and validate.max_pixels (DVC needs every listed key in
    params.yaml), and back again byte for byte."""
    import yaml

    from stages.lib.door import STAGE_PARAMS, declared_keys, for_modality

    committed = (ROOT / "dvc.yaml").read_text()
    audio = for_modality(committed, "audio")
    stages = yaml.safe_load(audio)["stages"]
    for name in (*STAGE_PARAMS, "report"):
        assert stages[name]["params"] == ["task", *declared_keys(name, "audio")], name
        assert not {"prepare.image_size", "validate.max_pixels"} & set(stages[name]["params"])
    assert "prepare.audio" in stages["prepare"]["params"]
    assert "validate.max_seconds" in stages["ingest"]["params"]
    assert for_modality(audio, "image") == committed


def test_init_writes_a_speech_project_without_image_size(tmp_path):
    """`tools.init --task speech`: the log-mel settings under prepare.audio, no image_size and
    no max_pixels anywhere in params.yaml, dvc.yaml's lists as an audio project's; the stages'
    door opens on it; back to classification, the image keys and lists return."""
    import yaml

    from tests.conftest import run_tool
    from tools.project import copy_project

    project = copy_project(ROOT, tmp_path / "project")
    proc = run_tool("init", "--task", "speech", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (project / "params.yaml").read_text()
    assert "image_size" not in text and "max_pixels" not in text
    params = yaml.safe_load(text)
    assert params["prepare"]["audio"] == {"sample_rate": 16000, "n_fft": 512, "hop": 160,
                                          "n_mels": 40, "frames": 321}
    lists = yaml.safe_load((project / "dvc.yaml").read_text())["stages"]
    assert "prepare.audio" in lists["prepare"]["params"]
    assert "validate.max_seconds" in lists["ingest"]["params"]
    opened = subprocess.run(
        ["python", "-c", "from stages.tasks import open_stage; t, p, _ = open_stage('prepare'); "
                         "print(p['prepare'].audio['frames'])"],
        cwd=project, capture_output=True, text=True)
    assert opened.stdout.strip() == "321", opened.stderr
    proc = run_tool("init", "--task", "classification", "--force", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    back = yaml.safe_load((project / "params.yaml").read_text())
    assert back["prepare"]["image_size"] == "auto" and "audio" not in back["prepare"]
    assert (project / "dvc.yaml").read_text() == (ROOT / "dvc.yaml").read_text()


def visible_text(page: str) -> str:
    """What a reader sees of a report page: its text without styles, scripts, embedded data
    and the code files' list (the hashes of stages/'s files, imagecore.py among them)."""
    page = re.sub(r"<(style|script)\b.*?</\1>", " ", page, flags=re.S)
    page = re.sub(r"<details><summary>Code:.*?</details>", " ", page, flags=re.S)
    page = re.sub(r"data:[\w/+.-]+;base64,[\w+/=]+", " ", page)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))
