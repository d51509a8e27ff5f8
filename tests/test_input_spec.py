"""Each modality speaks its own language (issue 57): the input recipe is spelt once, in the
spec module; the audio code names no image; an audio project's old params form is refused in
one line naming the new keys."""
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
    # issue 57 item 3 (h-serve57) renames the bad-input kinds: the kind's literal until then
    left = [line for line in found if '"not_image"' not in line]
    assert left == [], "\n".join(left)


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
