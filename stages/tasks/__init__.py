"""The task registry: every package under stages/tasks/ that defines `TASK` is a task.

`task: <name>` in params.yaml selects one. Adding a task means adding a package here (a
subclass of stages.tasks.base.Task, instantiated as `TASK` in its __init__.py); no stage module
changes. Nothing heavy is imported until a task is looked up.
"""
import importlib
import typing
from pathlib import Path

HERE = Path(__file__).resolve().parent


FAMILIES = ("common",)  # stages/tasks/common/: code several tasks share, no TASK


def available() -> list[str]:
    """Names of the task packages, sorted (no import)."""
    return sorted(p.name for p in HERE.iterdir()
                  if p.is_dir() and p.name.isidentifier() and p.name not in FAMILIES
                  and (p / "__init__.py").is_file())


def get(name: str):
    """The Task instance of the named task; an unknown name is an error listing the tasks."""
    from stages.lib.io import StageError
    from stages.tasks.base import Task

    if name not in available():
        raise StageError(f"task {name!r} does not exist; tasks: {', '.join(available())} "
                         f"(each is a package under stages/tasks/). Fix `task` in params.yaml.")
    task = getattr(importlib.import_module(f"stages.tasks.{name}"), "TASK", None)
    if not isinstance(task, Task) or task.name != name:
        raise StageError(f"stages/tasks/{name}/__init__.py must define TASK, an instance of a "
                         f"stages.tasks.base.Task subclass whose name is {name!r}.")
    return task


def default_task():
    """The task of a params file without `task` (and of model files from before tasks)."""
    from stages.lib.params import DEFAULT_TASK

    return get(DEFAULT_TASK)


def current(params_path="params.yaml"):
    """The task params.yaml selects, once every param is checked against it (check_params).
    Every stage looks its task up here first, so a params file that does not fit its task
    stops the pipeline before any stage works."""
    from stages.lib.params import parse_all, read, task_of

    raw = read(params_path)
    task = get(task_of(raw, params_path))
    check_params(task, parse_all(raw, params_path), params_path)
    return task


class Opened(typing.NamedTuple):
    """What the door hands a stage: its task, the params it declares (stages.lib.door), and
    the params file as read (the report shows it)."""
    task: object
    params: dict
    raw: dict


def open_stage(stage: str, params_path="params.yaml") -> Opened:
    """The one door into a stage: reads the params file once, checks every key against the
    task (check_params: a model, channels or key of another task stops every stage, not only
    the one that reads it), and hands the stage its task and the typed params it declares in
    dvc.yaml, and no others (stages.lib.door.declared)."""
    from stages.lib.door import declared
    from stages.lib.params import parse_all, read, task_of

    raw = read(params_path)
    task = get(task_of(raw, params_path))
    every = parse_all(raw, params_path)
    check_params(task, every, params_path)
    return Opened(task, declared(stage, every, task.modality_name), raw)


INIT = "python -m tools.init --task {task}"  # writes a params.yaml that fits the task


def check_params(task, params: dict, path="params.yaml") -> None:
    """Stop, naming every key of params ({section: typed params}) that does not fit the task
    (Task.param_problems: another task's model, channels or keys left in), in one message."""
    from stages.lib.io import StageError

    others = [get(name) for name in available() if name != task.name]
    problems = task.param_problems(params, others)
    if problems:
        lines = "".join(f"\n  - {line}" for line in problems)
        raise StageError(
            f"{path}: {len(problems)} param(s) do not fit task {task.name} (left from another "
            f"task?):{lines}\nStart from the task's own params with "
            f"`{INIT.format(task=task.name)}`, or fix each key in {path}.")


def load_model(path):
    """(model in eval mode, meta) of a model.pt (stages/lib/model/models.py save_model), rebuilt by
    the task it names (classification when it names none: files from before tasks)."""
    from stages.lib.model.models import read_model
    from stages.lib.params import DEFAULT_TASK

    state, meta = read_model(path)
    model = get(meta.get("task", DEFAULT_TASK)).build_model(meta["model"], meta)
    model.load_state_dict(state)
    return model.eval(), meta
