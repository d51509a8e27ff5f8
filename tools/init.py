"""Start a project for a task and a dataset: `python -m tools.init --task ocr [--source DIR]`.

Not a DVC stage: run it from the project root, then `dvc repro`. It reads the dataset with the
task's own annotation readers (stages/tasks/<task>/annotations.py, as ingest does), says what it
found, and rewrites params.yaml in place (comments kept, tools/params_text.py) with:

- `task`, and `data.source` (the built-in sample, data/sample, when no --source is given);
- the task's recipe (Task.recipe: model, epochs, augmentations...; the built-in sample's own
  sample_params without --source);
- `split.by: given` when every file has a split of its own (train, and val or test: a split the
  data lacks is carved from train by the split stage), else `hash`;
- prepare's settings fitted to the data (Task.fit_prepare: image size, channels, line height
  and width; mean/std auto);
- every other key a recipe of some task sets, back at its default, so no knob of the previous
  task is left behind. Keys no recipe touches (workers, device, remotes...) stay as they are.

It also rewrites dvc.yaml's `artifacts:` block (and nothing else in it): the deployable model,
models/model.onnx, is named after the task (`ocr`, labels [ocr]), the name GTO's version tags
and `dvc artifacts get` use (docs/registry.md).

One printed line per choice, then what to revisit for this task. It refuses to overwrite
uncommitted changes to params.yaml unless --force, and never writes under the data's folder.
"""
from collections import Counter
from pathlib import Path

import click

from stages.lib.door import other_keys, own_keys
from stages.tasks import available

PARAMS = Path("params.yaml")
# prepare's keys a recipe or fit may set; with the recipes' keys, every key init manages
PREPARE_KEYS = ("prepare.image_size", "prepare.channels", "prepare.mean", "prepare.std",
                "prepare.height", "prepare.width", "prepare.width_buckets", "prepare.letterbox",
                "prepare.audio")
SPLITS = ("train", "val", "test")
HOME: list = []  # the project root, with --into (init then works in the pipeline's folder)
# what another task's dataset looks like: (task, layout, test of the source folder)
MARKERS = (
    ("detection", "YOLO: data.yaml", lambda s: (s / "data.yaml").is_file()),
    ("detection", "COCO: annotations/instances_*.json",
     lambda s: any(s.glob("annotations/instances_*.json"))),
    ("segmentation", "nnU-Net: dataset.json", lambda s: (s / "dataset.json").is_file()),
    ("segmentation", "images/ + masks/", lambda s: (s / "masks").is_dir()
     and (s / "images").is_dir()),
    ("ocr", "a rec_gt.txt line list", lambda s: (s / "rec_gt.txt").is_file()),
    ("classification", "labels.csv", lambda s: (s / "labels.csv").is_file()),
)


class InitError(click.ClickException):
    """What init cannot do, and what to do instead; exit code 1."""


def refuse_uncommitted(force: bool) -> None:
    """Stop unless params.yaml is committed as it is (or --force)."""
    import subprocess

    proc = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--",
                           str(PARAMS)], capture_output=True, text=True)
    if proc.returncode != 0:
        why = "is not in a git repository, so init cannot tell your changes from the committed file"
    elif proc.stdout.strip():
        why = "has changes that are not committed (git diff params.yaml)"
    else:
        return
    if force:
        click.echo(f"init: params.yaml {why}; --force: overwriting them")
        return
    raise InitError(f"params.yaml {why}. Commit them first (git commit params.yaml), or run "
                    f"init again with --force to overwrite them.")


def looks_like(source: Path, task) -> tuple | None:
    """(task, layout) of another task's dataset that source looks like, when it carries none of
    this task's marks."""
    marks = [(name, layout) for name, layout, test in MARKERS if test(source)]
    if any(name == task.name for name, _ in marks):
        return None
    return marks[0] if marks else None


def headers(source: Path, rows: list, modality) -> tuple[list, list]:
    """([(split, width, height, grey)] of up to the modality's FIT_HEADERS rows' files, evenly
    spread, or of every row where it is 0), and the paths among them that the task's modality
    cannot read a header of (its `header`)."""
    step = max(1, -(-len(rows) // modality.FIT_HEADERS)) if modality.FIT_HEADERS else 1
    facts, bad = [], []
    for r in rows[::step]:
        try:
            facts.append((r.get("split") or "", *modality.header(source / r["path"])))
        except Exception:  # noqa: BLE001 (a decoder raises many kinds on what it cannot read)
            bad.append(r["path"])
    return facts, bad


def dvc_blockers(source: Path) -> list[str]:
    """A note per kind of entry DVC's walk of the source trips on before ingest runs
    (tools/source_check.py): `dvc add` and `dvc repro` would hang or fail on them."""
    from stages.lib.show import text
    from tools.source_check import KINDS, blocking_entries

    by_kind: dict[str, list[str]] = {}
    for rel, kind in blocking_entries(source):  # escaped: bytes not UTF-8 show as \xNN
        by_kind.setdefault(kind, []).append(text((source / rel).as_posix()))
    notes = []
    for kind, paths in by_kind.items():
        what, effect, fix = KINDS[kind]
        more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
        notes.append(f"{len(paths)} {what} ({', '.join(paths[:3])}{more}): {effect}; {fix} "
                     f"(python -m tools.doctor lists them all).")
    return notes


def sniff(task, source: Path, settings: dict):
    """(what was found in words, usable rows, header facts, notes) of the source, read as
    ingest reads it (settings: the task's read_settings of params.yaml, as ingest's); an error
    naming the layouts expected when it holds none of them."""
    from stages.ingest import walk
    from stages.lib.io import StageError

    other = looks_like(source, task)
    hint = (f" It looks like a {other[0]} dataset ({other[1]}): run init with --task {other[0]}."
            if other else "")
    if other:
        raise InitError(f"{source} is not a {task.name} dataset init can read: expected "
                        f"{task.layouts}.{hint}")
    try:
        found = task.read_annotations(source, walk(source), settings)
    except StageError as exc:
        raise InitError(exc.message + hint) from None
    rows = [{"path": rel, **v} for rel, v in sorted(found.values.items())
            if rel not in found.errors]
    facts, not_images = headers(source, rows, task.modality)
    if not facts:
        raise InitError(f"{source}: no {task.name} images init can read in it: expected "
                        f"{task.layouts}.{hint}")
    notes = []
    if found.errors:
        kinds = Counter(kind for kind, _ in found.errors.values())
        path, (_, message) = sorted(found.errors.items())[0]
        notes.append(f"{len(found.errors)} entries the data gate (validate) will stop on ("
                     + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
                     + f"), e.g. {path}: {message}. Fix them, or set validate.on_error: "
                       f"quarantine to train without them.")
    if not_images:
        notes.append(f"{len(not_images)} of the {len(facts) + len(not_images)} files read are "
                     f"not images (e.g. {not_images[0]}): ingest lists them with an error.")
    notes += dvc_blockers(source)
    summary = (f"{task.layout(found)}: {task.data_summary(rows)}, {len(rows)} files"
               + split_words(rows))
    return summary, rows, facts, notes


def split_words(rows: list) -> str:
    own = {r.get("split") or "" for r in rows}
    named = [s for s in SPLITS if s in own]
    if not named:
        return ", no split of its own"
    missing = [s for s in SPLITS if s not in own]
    return (f", its own {'/'.join(named)} split" + (f" (no {' or '.join(missing)})" if missing
                                                     else "")
            + (" for some files only" if "" in own else ""))


def split_choice(rows: list, p) -> tuple:
    """("split.by", mode, why) from the files' own splits."""
    own = Counter(r.get("split") or "" for r in rows)
    if "train" not in own or own[""]:
        why = ("the data has no split of its own" if set(own) == {""} else
               f"{own['']} files have no split of their own (given needs one for each)"
               if own[""] else "the data's own split has no train")
        return ("split.by", "hash", f"{why}: a file's split is a function of its content "
                                    f"hash and split.seed, stable as the data grows")
    missing = [s for s in ("val", "test") if s not in own]
    carve = " and ".join(f"split.{s} ({getattr(p, s)}) of train as {s}" for s in missing)
    return ("split.by", "given",
            "the data's own split, kept" + (f"; the split stage carves {carve} (hash rule, "
                                            f"split.seed {p.seed}: seeded, stable, groups and "
                                            f"near-duplicates kept whole)" if missing else ""))


def source_value(source: Path) -> tuple[str, bool]:
    """(data.source as params.yaml holds it, whether it is inside the project): relative to
    the working directory (a pipeline's folder with --into: ../../data/mine)."""
    import os

    home = HOME[0] if HOME else Path.cwd()
    try:
        source.resolve().relative_to(home.resolve())
    except ValueError:
        return str(source.resolve()), False
    return Path(os.path.relpath(source.resolve(), Path.cwd().resolve())).as_posix(), True


def tracked(rel: str) -> bool:
    """Is the project-relative path versioned: by git, a .dvc file (its own or a parent
    folder's), or as an out of a dvc.yaml stage (data/sample)?"""
    import subprocess

    import yaml

    listed = subprocess.run(["git", "ls-files", "--", rel], capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout.strip():
        return True
    path = Path(rel)
    if any(Path(f"{p}.dvc").is_file() for p in (path, *path.parents) if p != Path(".")):
        return True
    stages = (yaml.safe_load(Path("dvc.yaml").read_text()) or {}).get("stages", {})
    outs = {next(iter(o)) if isinstance(o, dict) else o
            for s in stages.values() for o in s.get("outs", [])}
    return any(path == Path(o) or Path(o) in path.parents for o in outs)


def defaults() -> dict:
    """{dotted key: default} of every params key (stages/lib/params.py's declarations)."""
    import dataclasses

    from stages.lib.params import SECTIONS

    return {f"{name}.{f.name}": getattr(cls(), f.name)
            for name, cls in SECTIONS.items() for f in dataclasses.fields(cls)}


def managed_keys() -> set:
    """Every key init sets or resets: those of any task's recipe or sample, prepare's shape."""
    from stages.tasks import get

    keys = {"data.source", "split.by", *PREPARE_KEYS}
    for name in available():
        task = get(name)
        # task_keys (where a task declares them): keys only some tasks read, which another
        # task must not inherit either
        keys |= set(task.recipe) | set(task.sample_params) | set(getattr(task, "task_keys", ()))
    return keys


def plan(raw: dict, choices: list) -> tuple[dict, list]:
    """({dotted key: value} to write, [printed line]) from the choices [(key, value, why)]
    plus every other managed key back at its default."""
    from tools.params_text import flat, render

    now = flat(raw)
    values, lines = {}, []
    for key, value, why in choices:
        values[key] = value
        was = f"; was {render(now[key])}" if key in now and now[key] != value else ""
        lines.append(f"  {key}: {render(value)}  ({why}{was})")
    default = defaults()
    for key in sorted(managed_keys() - set(values)):
        if now.get(key, default[key]) != default[key]:
            values[key] = default[key]
            lines.append(f"  {key}: {render(default[key])}  (the default; was "
                         f"{render(now[key])})")
    return values, lines


def with_gpu_recipe(raw: dict, values: dict, lines: list) -> tuple[dict, list]:
    """values and lines with the GPU recipe (tools/gpu_recipe.py: a batch that fills the GPU,
    the lr scaled, the warm-up lengthened) when this machine has a GPU; as they are on the
    CPU."""
    from tools import gpu_recipe
    from tools.params_text import flat, render

    extra = gpu_recipe.choices({**defaults(), **flat(raw), **values})
    for key, value, why in extra:
        values[key] = value
        lines = [line for line in lines if not line.startswith(f"  {key}: ")]
        lines.append(f"  {key}: {render(value)}  ({why})")
    return values, lines


def modality_keys(modality: str, raw: dict, values: dict, lines: list) -> tuple:
    """(values, lines, keys to remove): the modality's own keys (stages/lib/door.py
    MODALITY_KEYS: an audio project's prepare.audio and validate.max_seconds) set where
    params.yaml lacks them, another modality's left out and removed (dvc.yaml lists only the
    project's modality's keys, and DVC needs each listed one in params.yaml)."""
    from tools.params_text import flat, render

    now, default, drop = flat(raw), defaults(), other_keys(modality)
    values = {k: v for k, v in values.items() if k not in drop}
    lines = [line for line in lines if not line.startswith(tuple(f"  {k}:" for k in drop))]
    for key in own_keys(modality):
        if key not in now and key not in values:
            values[key] = default[key]
            lines.append(f"  {key}: {render(default[key])}  (the default: the {modality} "
                         f"tasks' key)")
    article = "an" if modality[0] in "aeiou" else "a"
    lines += [f"  {key}: removed ({article} {modality} project holds "
              f"{' and '.join(own_keys(modality))} instead)" for key in drop if key in now]
    return values, lines, drop


def write_modality_lists(modality: str) -> bool:
    """dvc.yaml's params lists as the modality's projects list them (door.for_modality); the
    rest of the file byte for byte. True when it changed."""
    from stages.lib.door import for_modality
    from stages.lib.io import write_bytes

    path = Path("dvc.yaml")
    text = path.read_text()
    new = for_modality(text, modality)
    if new != text:
        write_bytes(path, new.encode())
    return new != text


def write_params(values: dict, drop=()) -> None:
    """params.yaml with values set and the keys drop removed, comments kept; checked by the
    params loader first."""
    import yaml

    from stages.lib.io import write_bytes
    from stages.lib.params import parse_all
    from tools.params_text import edit, remove

    try:
        text = remove(edit(PARAMS.read_text(), values), drop)
    except ValueError as exc:  # a layout params_text cannot edit (block-style lists...)
        raise InitError(f"{exc}. Restore the committed layout (git checkout params.yaml) or set "
                        f"these keys by hand.") from None
    parse_all(yaml.safe_load(text), PARAMS)  # a value the stages would refuse: refused here
    write_bytes(PARAMS, text.encode())


def artifact_block(task_name: str, name: str | None = None) -> str:
    """dvc.yaml's `artifacts:` block for a task: its model, named after it (or name)."""
    return (f"artifacts:\n  {name or task_name}:\n    type: model\n    path: models/model.onnx\n"
            f"    desc: the {task_name} model exported to ONNX by the export stage, for predict "
            f"and serve\n    labels:\n      - {task_name}\n")


def write_artifact(task_name: str, name: str | None = None) -> bool:
    """Replace dvc.yaml's `artifacts:` block (up to the next top-level key) with the task's;
    the rest of the file, comments included, is kept byte for byte. True when it changed."""
    import re

    from stages.lib.io import write_bytes

    path = Path("dvc.yaml")
    text = path.read_text()
    block = re.compile(r"^artifacts:\n(?:[ #].*\n|\n)*?(?=^\S)", re.M)
    if not block.search(text):
        raise InitError("dvc.yaml has no `artifacts:` block followed by another top-level key: "
                        "restore the committed dvc.yaml (git checkout dvc.yaml).")
    new = block.sub(lambda _m: artifact_block(task_name, name), text, count=1)
    if new != text:
        write_bytes(path, new.encode())
    return new != text


def sample_choices(task) -> list:
    name = task.name
    return [("data.source", "data/sample", f"the built-in {name} sample: the sample stage "
                                           f"writes it"),
            *((k, v, f"the {name} sample's recipe") for k, v in task.sample_params.items()
              if k != "data.source")]


def own_choices(task, source: Path, raw: dict) -> list:
    from stages.lib.params import Split, parse, parse_all

    summary, rows, facts, notes = sniff(task, source, task.read_settings(parse_all(raw, PARAMS)))
    click.echo(f"found: {summary}")
    for note in notes:
        click.echo(f"note: {note}")
    rel, _ = source_value(source)
    return [("data.source", rel, "your data"),
            split_choice(rows, parse(Split, "split", raw.get("split"), PARAMS)),
            *((k, v, f"the {task.name} recipe") for k, v in task.recipe.items()),
            *((k, v, f"fitted: {why}") for k, v, why in task.fit_prepare(facts))]


@click.command()
@click.option("--task", "task_name", required=True, type=click.Choice(available()),
              help="The task of the project: a package under stages/tasks/.")
@click.option("--source", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None,
              help="Your dataset's folder, in one of the task's layouts (ImageFolder or "
                   "labels.csv; YOLO or COCO; images + masks or nnU-Net; an OCR line list or "
                   "image + .txt pairs). It is only read. Default: the task's built-in sample "
                   "(data/sample, written by `dvc repro`'s sample stage).")
@click.option("--into", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Another pipeline in this repository: a folder (pipelines/NAME) with its "
                   "own params.yaml, dvc.yaml (the same stages; code from the root's stages/), "
                   "data/, models/, metrics/; its artifact is pipelines/NAME:NAME. Run it with "
                   "`dvc repro pipelines/NAME/dvc.yaml`.")
@click.option("--force", is_flag=True,
              help="Overwrite params.yaml even when it has uncommitted changes (or is not in "
                   "a git repository).")
def main(task_name, source, into, force):
    """Set params.yaml up for a task and a dataset, then say what it chose and why.

    Run from the project root, then `dvc repro`. It reads the dataset's layout with the task's
    own readers and writes `task`, `data.source`, the task's recipe, `split.by` (given when the
    data has its own split; a missing val or test split is carved from train) and prepare's
    settings fitted to the data, keeping params.yaml's comments. It never modifies the data.
    """
    import yaml

    from stages.tasks import get

    if not (PARAMS.is_file() and Path("dvc.yaml").is_file()):
        raise InitError("params.yaml and dvc.yaml not found: run init from the project root.")
    name, created = None, False
    if into is not None:
        import os

        from tools.pipelines import make_folder

        created = make_folder(into, force)
        click.echo(f"init: pipeline {into.as_posix()} ({'new' if created else 'set up again'})")
        HOME[:] = [Path.cwd()]
        source = source.resolve() if source is not None else None
        os.chdir(into)
        name = into.name
    if into is None or not created:  # a new folder's params.yaml is init's own copy
        refuse_uncommitted(force)
    task = get(task_name)
    raw = yaml.safe_load(PARAMS.read_text()) or {}
    if source is None:
        click.echo(f"init: task {task.name} on its built-in sample")
        choices = sample_choices(task)
    else:
        click.echo(f"init: task {task.name} on {source}")
        choices = own_choices(task, source, raw)
    values, lines = plan(raw, [("task", task.name, f"stages/tasks/{task.name}/"), *choices])
    values, lines = with_gpu_recipe(raw, values, lines)
    values, lines, drop = modality_keys(task.modality_name, raw, values, lines)
    write_params(values, drop)
    click.echo("params.yaml:\n" + "\n".join(lines))
    if write_modality_lists(task.modality_name):
        click.echo(f"dvc.yaml: the stages' params list the {task.modality_name} keys "
                   f"({', '.join(own_keys(task.modality_name))})")
    if write_artifact(task.name, name):
        full = f"{into.as_posix()}:{name}" if into is not None else task.name
        click.echo(f"dvc.yaml: artifact {full} (models/model.onnx; docs/registry.md)")
    from tools.plots_template import ensure, shown

    written = ensure()
    if written:
        click.echo(f"plots: {shown(written)} (dvc plots' offline "
                   f"page template; the report stage rewrites it)")
    if source is not None:
        click.echo(f"revisit for {task.name} after the first run:")
        for key, why in task.revisit:
            click.echo(f"  {key}: {why}")
        rel, inside = source_value(source)
        if not inside:
            click.echo(f"version it: {rel} is outside the project, so DVC sees it only as a "
                       f"path; copy it under data/ and `dvc add` it there to version it.")
        elif not tracked(rel):
            if HOME:  # --into: said as run from the root, where the user is
                import os

                rel = Path(os.path.relpath(source.resolve(), HOME[0].resolve())).as_posix()
            ignore = (Path(rel).parent / ".gitignore").as_posix()
            click.echo(f"version it: dvc add {rel} && git add {rel}.dvc {ignore} && git commit "
                       f"-m \"data: {Path(rel).name}\"")
    if into is not None:
        click.echo(f"next: dvc repro {into.as_posix()}/dvc.yaml  (from the root; dvc exp run in "
                   f"{into.as_posix()}/)")
        return
    click.echo("next: dvc repro  (or python -m tools.smoke first: a few images, 1 epoch)")


if __name__ == "__main__":
    main()
