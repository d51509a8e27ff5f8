"""What a stage may read of params.yaml: the keys it declares in dvc.yaml, and no other.

DVC reruns a stage when a param listed under its `params:` changes, and only then. A stage that
read a key it does not list would go on being "up to date" after that key changed, and dvc.lock
would name params that did not make its outs. So the one door into a stage
(stages.tasks.open_stage) hands it `declared(stage, ...)`: the sections it lists whole, as their
typed dataclasses, and the sections it lists key by key as a view that refuses every other key
with an error naming the stage, the key and the fix.

The lists are an image project's; a project of another modality lists its own keys where the
image ones stand (MODALITY_KEYS: an audio project's prepare.audio and validate.max_seconds for
prepare.image_size and validate.max_pixels). DVC refuses a listed param that params.yaml lacks,
so a project's dvc.yaml follows its modality: tools.init (and tools/project.py's copies)
rewrite its lists (for_modality), and its params.yaml holds only its modality's keys.

The one exception, named here with its reason: prepare's placement keys (workers, engine,
ray_address, ray_inputs) say where prepare runs, never what it writes (the same bytes, tested in
tests/test_prepare_ray.py and tests/test_scale_prepare.py), so prepare reads them undeclared.
"""
import dataclasses

from stages.lib.io import StageError
from stages.lib.modality import AUDIO, DEFAULT
from stages.lib.params import PREPARE_PLACEMENT, PREPARE_RESULT, SECTIONS

# What each stage reads, in one place: its own section and the few reads across sections. Every
# stage also reads `task`. dvc.yaml's `params:` of each stage lists exactly these (tested).
STAGE_PARAMS = {
    "sample": ("sample",),
    # bombs are never decoded; an image's boxes are capped as they are read
    "ingest": ("data.source", "ingest", "validate.max_pixels", "validate.max_boxes"),
    # the task's check_settings: the CTC length rule (ocr: prepare.height/width; speech: the
    # log-mel spec's frames and hop) and audio's sample rate (an audio project's prepare.audio)
    "validate": ("validate", "prepare.image_size", "prepare.height", "prepare.width"),
    "split": ("split", "validate.near_dup_distance"),  # near-duplicates share a split
    "prepare": ("data.source", *PREPARE_RESULT),
    "train": ("train",),
    "evaluate": ("evaluate", "train.kernels", "train.threads"),  # the kernel profile
    # hashed into the ONNX metadata; evaluate: each format's test metric with export.formats,
    # and detection's export.score_threshold when null (evaluate.score_threshold)
    "export": ("data", "split", *PREPARE_RESULT, "train", "evaluate", "export"),
}
# the report shows and hashes every param but the placement ones: every section, prepare's
# keys one by one (dvc.yaml's report stage lists these, tested)
REPORT_PARAMS = tuple(key for section in SECTIONS
                      for key in (PREPARE_RESULT if section == "prepare" else (section,)))

# {stage: {section: keys}} read without a dvc.yaml entry, each for the reason above
UNDECLARED_READS = {"prepare": {"prepare": PREPARE_PLACEMENT}}

IMAGE = DEFAULT  # the modality whose keys STAGE_PARAMS and REPORT_PARAMS list
# {modality: {an image project's key: this modality's}}: the input spec's key and the input
# limit's, in the user's words (stages/lib/modality/audiospec.py)
MODALITY_KEYS = {AUDIO: {"prepare.image_size": "prepare.audio",
                         "validate.max_pixels": "validate.max_seconds"}}


def declared_keys(stage: str, modality: str = IMAGE) -> tuple[str, ...]:
    """The params the stage lists in dvc.yaml besides `task` (STAGE_PARAMS; the report's:
    REPORT_PARAMS) in a project of that modality (MODALITY_KEYS)."""
    keys = REPORT_PARAMS if stage == "report" else STAGE_PARAMS[stage]
    swap = MODALITY_KEYS.get(modality, {})
    return tuple(swap.get(key, key) for key in keys)


def own_keys(modality: str = IMAGE) -> tuple[str, ...]:
    """The swapped keys (MODALITY_KEYS) a project of that modality lists and holds."""
    image_keys = dict.fromkeys(key for swap in MODALITY_KEYS.values() for key in swap)
    return tuple(MODALITY_KEYS.get(modality, {}).get(key, key) for key in image_keys)


def other_keys(modality: str = IMAGE) -> tuple[str, ...]:
    """The swapped keys (MODALITY_KEYS) of other modalities, which a project of this one does
    not hold: its params.yaml leaves them out and its dvc.yaml lists none of them."""
    every = {key for swap in MODALITY_KEYS.values() for pair in swap.items() for key in pair}
    return tuple(sorted(every - set(own_keys(modality))))


def for_modality(text: str, modality: str = IMAGE) -> str:
    """dvc.yaml's text with every `params:` item of a swapped key (MODALITY_KEYS) as a project
    of that modality lists it; the rest of the file byte for byte."""
    import re

    target = {}
    for swap in MODALITY_KEYS.values():
        for image_key, its_key in swap.items():
            target[image_key] = target[its_key] = MODALITY_KEYS.get(modality, {}).get(
                image_key, image_key)
    pattern = re.compile(r"^(\s+- )(" + "|".join(map(re.escape, sorted(target))) + r")$", re.M)
    return pattern.sub(lambda m: m.group(1) + target[m.group(2)], text)


def fix(stage: str, key: str) -> str:
    return (f"stage {stage} read `{key}`, which it does not declare: add {key!r} to "
            f"STAGE_PARAMS[{stage!r}] in stages/lib/door.py and to the {stage} stage's "
            f"`params:` in dvc.yaml, or DVC would not rerun {stage} when it changes")


class Keys:
    """A section's typed params limited to some of its keys: any other key is an error."""

    def __init__(self, stage: str, section: str, values, keys):
        self._stage, self._section, self._values = stage, section, values
        allowed = set(keys)
        self._keys = tuple(f.name for f in dataclasses.fields(values) if f.name in allowed)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._keys:
            raise StageError(fix(self._stage, f"{self._section}.{name}"))
        return getattr(self._values, name)

    def asdict(self) -> dict:
        """The allowed keys and their values, in the section's field order."""
        return {k: getattr(self._values, k) for k in self._keys}


def asdict(values) -> dict:
    """A section's values as a dict: a dataclass's every field, a Keys view's allowed keys."""
    return values.asdict() if isinstance(values, Keys) else dataclasses.asdict(values)


class Declared(dict):
    """{section: typed params or a Keys view} of what a stage declares; asking for a section it
    does not declare at all is the same error as for a key."""

    def __init__(self, stage: str, sections: dict):
        super().__init__(sections)
        self.stage = stage

    def __missing__(self, section):
        raise StageError(fix(self.stage, section))


def declared(stage: str, every: dict, modality: str = IMAGE) -> Declared:
    """Declared params of the stage in a project of that modality, from every section's typed
    params ({section: dataclass})."""
    whole, keys = set(), {}
    for entry in declared_keys(stage, modality):
        section, _, key = entry.partition(".")
        if key:
            keys.setdefault(section, set()).add(key)
        else:
            whole.add(section)
    for section, extra in UNDECLARED_READS.get(stage, {}).items():
        if section not in whole:
            keys.setdefault(section, set()).update(extra)
    out = {s: every[s] for s in SECTIONS if s in whole}
    out.update({s: Keys(stage, s, every[s], k) for s, k in keys.items() if s not in whole})
    return Declared(stage, dict(sorted(out.items())))
