"""The modality layer (stages/lib/modality/) is the one place that knows an input is an image:
nothing else imports Pillow, and every modality provides the whole interface."""
import ast

import pytest

from stages.lib import modality
from tests.conftest import ROOT

# where Pillow may be imported: the modality layer, and the tasks (image tasks decode their
# masks, draw their plots); bench/ and tests/ write synthetic images
PIL_ALLOWED = ("stages/lib/modality/", "stages/tasks/")


def imported_modules(path) -> list[tuple[str, int]]:
    """(module, line) of every import in a file, function-level ones included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.append((node.module or "", node.lineno))
    return out


def test_nothing_outside_the_modality_and_the_tasks_imports_soundfile():
    found = []
    for folder in ("stages", "tools"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(PIL_ALLOWED):
                continue
            found += [f"{rel}:{line} imports {name}" for name, line in imported_modules(path)
                      if name == "soundfile"]
    assert not found, "soundfile outside the modality layer:\n" + "\n".join(found)


def test_nothing_outside_the_modality_and_the_tasks_imports_pil():
    found = []
    for folder in ("stages", "tools"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(PIL_ALLOWED):
                continue
            found += [f"{rel}:{line} imports {name}" for name, line in imported_modules(path)
                      if name == "PIL" or name.startswith("PIL.")]
    assert not found, "Pillow outside the modality layer:\n" + "\n".join(found)


@pytest.mark.parametrize("name", sorted(modality.MODALITIES))
def test_every_modality_provides_the_whole_interface(name):
    module = modality.get(name)
    missing = [attr for attr in modality.INTERFACE if not hasattr(module, attr)]
    assert not missing, f"modality {name} lacks {missing}"
    assert set(module.INSPECT_ERRORS) <= {kind for kind, (k, _) in module.CHECKS.items()
                                          if k == "blocking"}


def test_a_task_picks_its_modality_and_an_unknown_one_is_named():
    from stages.tasks import available, get

    for task in available():
        assert get(task).modality is modality.get(get(task).modality_name)
    with pytest.raises(ValueError, match="unknown modality 'video'"):
        modality.get("video")


def test_the_image_modality_decodes_for_prepare_as_it_reads_for_predict(tmp_path):
    """prepare's decode (one open: the header facts and the sample) and predict's guarded
    read give the same sample and the same upright size."""
    from tests.conftest import write_image

    image = modality.get("image")
    path = write_image(tmp_path / "a.png", size=(40, 20), mode="RGB")
    facts, sizes = [], []
    spec = image.stored(16, 3)
    sample, size = image.decode(path, spec, facts, sizes)
    read = image.read(path, spec)
    assert sample.tobytes() == read.tobytes() and size == read.source_size == (40, 20)
    assert facts == [(20, False)] and sizes == [(40, 20)]
    assert sample.shape == image.input_shape(spec) == image.warmup_input(spec).shape
    assert image.input_spec({"image_size": 16, "channels": 3}) == (3, 16, 16)
