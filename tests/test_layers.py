"""The house's floors (docs/pipeline.md, floors and rooms): every import under stages/, tools/
and bench/, read with ast (function-level imports included, and a module named as text to
importlib.import_module or __import__), points down or sideways, never up, and no modules, nor
floors, import each other in a cycle.

Floors, from the ground up: stages/lib; stages/report (the report's helpers and each task's
report sections, stages/report/tasks/) beside stages/tasks, neither importing the other (so no
report code is a task's, and so train's, code); the stage modules (stages/<stage>.py and
`python -m stages.report`); tools/; bench/. Within stages/tasks, no task package imports another:
what tasks share is a family of stages/tasks/common/; likewise no task's report module imports
another task's.
"""
import ast
import functools
from pathlib import Path

import pytest

from stages.lib.codedeps import imports, modules  # the one walker: dvc.yaml's code deps use it

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("stages", "tools", "bench")
FLOORS = ("lib", "report", "tasks", "stage", "tools", "bench")


def floor(module: str) -> str:
    """Which floor a module stands on."""
    top, _, rest = module.partition(".")
    if top in ("tools", "bench"):
        return top
    sub = rest.split(".")[0]
    if sub == "lib":
        return "lib"
    if sub == "tasks":
        return "tasks"
    if sub == "report" and module != "stages.report.__main__":
        return "report"
    return "stage"  # stages/<stage>.py, the stages package itself and `python -m stages.report`


@functools.lru_cache(maxsize=1)
def graph() -> dict[str, list[tuple[str, int]]]:
    known = modules(ROOT, PACKAGES)
    return {name: imports(name, path, known) for name, path in known.items()}


ALLOWED = {  # what each floor may import besides itself
    "lib": set(),
    "report": {"lib"},
    "tasks": {"lib"},  # not report: a task's report lives in stages/report/tasks/
    "stage": {"lib", "report", "tasks"},
    "tools": {"lib", "report", "tasks", "stage"},
    "bench": {"lib", "report", "tasks", "stage", "tools"},
}


def upward(edges_of: dict[str, list[tuple[str, int]]]) -> list[str]:
    """Every import of a module of a floor above the importer's, as a line of text."""
    return sorted(f"{name} (line {line}, a {floor(name)} module) imports {target} "
                  f"({floor(target)})"
                  for name, edges in edges_of.items() for target, line in edges
                  if floor(target) != floor(name) and floor(target) not in ALLOWED[floor(name)])


def test_no_module_imports_a_floor_above_its_own():
    found = upward(graph())
    assert not found, "imports pointing up a floor:\n" + "\n".join(found)


def find_cycle(edges: dict[str, list[str]]) -> list[str]:
    """One import cycle [a, b, ..., a], or [] when there is none (iterative DFS)."""
    state, stack_of = {}, {}
    for start in sorted(edges):
        if start in state:
            continue
        path, iters = [start], [iter(sorted(set(edges[start])))]
        state[start], stack_of[start] = "open", 0
        while path:
            nxt = next(iters[-1], None)
            if nxt is None:
                state[path.pop()] = "done"
                iters.pop()
                continue
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                state[nxt] = "open"
                path.append(nxt)
                iters.append(iter(sorted(set(edges.get(nxt, ())))))
    return []


def test_no_import_cycle_among_the_modules():
    edges = {name: [t for t, _ in targets] for name, targets in graph().items()}
    cycle = find_cycle(edges)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_no_import_cycle_among_the_floors():
    """Floor to floor, whatever the modules: no floor reaches back to one that reaches it."""
    edges = {}
    for name, targets in graph().items():
        edges.setdefault(floor(name), []).extend(floor(t) for t, _ in targets
                                                 if floor(t) != floor(name))
    cycle = find_cycle(edges)
    assert not cycle, "floors import each other: " + " -> ".join(cycle)


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    """The graph is only as good as its reading of imports: a function-level import, a
    `from pkg import module` and a relative one are all edges, and a cycle is found."""
    pkg = tmp_path / "stages"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "lib" / "__init__.py").write_text("")
    (pkg / "lib" / "a.py").write_text("def f():\n    from stages.tasks import get\n")
    (pkg / "lib" / "b.py").write_text("from . import a\nfrom .a import f\n")
    known = {"stages": None, "stages.lib": None, "stages.lib.a": None, "stages.lib.b": None,
             "stages.tasks": None}
    assert imports("stages.lib.a", pkg / "lib" / "a.py", known) == [("stages.tasks", 2)]
    assert imports("stages.lib.b", pkg / "lib" / "b.py", known) == [("stages.lib.a", 1),
                                                                    ("stages.lib.a", 2)]
    assert find_cycle({"x": ["y"], "y": ["z"], "z": ["x"], "w": ["x"]}) == ["x", "y", "z", "x"]
    assert find_cycle({"x": ["y"], "y": ["z"], "w": ["x", "z"]}) == []
    assert floor("stages.report.__main__") == "stage" and floor("stages.report.html") == "report"


def test_the_checker_sees_a_module_imported_by_name_as_text(tmp_path):
    """A module named as text to importlib.import_module or __import__ is an edge like any
    import (stages/lib/rayprep.py once ran importlib.import_module("stages.prepare"), which
    the ast-only reading missed): a lib module doing so is caught going up a floor."""
    source = tmp_path / "c.py"
    source.write_text("import importlib\n"
                      "from importlib import import_module\n"
                      "def f(name):\n"
                      "    importlib.import_module('stages.prepare')\n"
                      "    import_module('stages.tasks.ocr')\n"
                      "    __import__('tools.predict', fromlist=['main'])\n"
                      "    importlib.import_module(f'stages.tasks.{name}')\n"
                      "    importlib.import_module(name)\n"
                      "    import_module('.sibling', package='stages.lib')\n"
                      "    __import__('os')\n")
    known = {"stages", "stages.lib", "stages.lib.c", "stages.prepare", "stages.tasks",
             "tools", "tools.predict"}
    edges = imports("stages.lib.c", source, known)
    assert edges == [("stages.prepare", 4), ("stages.tasks", 5), ("tools.predict", 6),
                     ("stages.tasks", 7)]
    assert upward({"stages.lib.c": edges}) == [
        "stages.lib.c (line 4, a lib module) imports stages.prepare (stage)",
        "stages.lib.c (line 5, a lib module) imports stages.tasks (tasks)",
        "stages.lib.c (line 6, a lib module) imports tools.predict (tools)",
        "stages.lib.c (line 7, a lib module) imports stages.tasks (tasks)"]
    assert upward({"stages.prepare": edges[:2]}) == []  # a stage may import a task


FAMILIES = ("base", "common")  # stages.tasks.base, stages.tasks.common.*: what tasks share


def task_of(module: str, package: str) -> str | None:
    """The task a module of package (stages.tasks, stages.report.tasks) belongs to: stages.tasks.
    ocr.checks -> ocr; None for the package itself and for a family (FAMILIES) or, in the
    report's package, a shared helper module that is not named after a task."""
    from stages.tasks import available

    if not module.startswith(package + "."):
        return None
    name = module[len(package) + 1:].split(".")[0]
    return name if name not in FAMILIES and name in available() else None


def cross_task(edges_of: dict[str, list[tuple[str, int]]]) -> list[str]:
    """Every import from one task's modules into another task's, in stages/tasks/ (a task
    package) or in stages/report/tasks/ (a task's report module), as a line of text."""
    found = []
    for package in ("stages.tasks", "stages.report.tasks"):
        for name, edges in edges_of.items():
            own = task_of(name, package)
            if own is None:
                continue
            found += [f"{name} (line {line}, task {own}) imports {target} (task {other})"
                      for target, line in edges
                      for other in [task_of(target, "stages.tasks")
                                    or task_of(target, "stages.report.tasks")]
                      if other is not None and other != own]
    return sorted(found)


def test_no_task_imports_another_task():
    """A task package imports stages.tasks.base and the families of stages/tasks/common/, never
    another task's package (its code would then be the other task's too, outside its deps);
    a task's report module (stages/report/tasks/<task>.py) imports no other task's module."""
    found = cross_task(graph())
    assert not found, "tasks importing other tasks:\n" + "\n".join(found)


def test_the_cross_task_check_sees_a_task_importing_another():
    """The check fails on the code before the task families: audio subclassed classification
    and reused its checks; speech's report took audio's players and classification's
    eval_file. Families and helpers are no task."""
    edges = {"stages.tasks.audio": [("stages.tasks.classification", 7),
                                    ("stages.tasks.classification.checks", 8),
                                    ("stages.tasks.common.singlelabel", 9),
                                    ("stages.tasks.base", 10)],
             "stages.report.tasks.speech": [("stages.report.tasks.audio", 6),
                                            ("stages.report.tasks.sound", 7),
                                            ("stages.report.facts", 8)],
             "stages.tasks.common.ctctext": [("stages.tasks.base", 10)]}
    assert cross_task(edges) == [
        "stages.report.tasks.speech (line 6, task speech) imports stages.report.tasks.audio "
        "(task audio)",
        "stages.tasks.audio (line 7, task audio) imports stages.tasks.classification "
        "(task classification)",
        "stages.tasks.audio (line 8, task audio) imports stages.tasks.classification.checks "
        "(task classification)"]


@pytest.mark.parametrize("path, name", [("stages/train.py", "main"),
                                        ("stages/lib/train/loop.py", "fit"),
                                        ("tools/serve/app.py", "create_app")])
def test_the_once_longest_functions_are_split_into_named_steps(path, name):
    """train.main (231 lines), train.fit (147) and serve.create_app (159) were each at least
    twice the size of anything else; each is now a list of steps named for what they do."""
    tree = ast.parse((ROOT / path).read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    lines = node.end_lineno - node.lineno
    assert lines < 80, f"{path}: {name} spans {lines} lines"


def test_the_picture_names_every_room():
    """docs/pipeline.md's picture of the floors names every module of stages/lib/ (each wing),
    stages/report/, the task families and every task package: a new room is drawn in."""
    import re

    text = (ROOT / "docs/pipeline.md").read_text()
    words = set(re.findall(r"\w+", text[text.index("## Floors and rooms"):
                                          text.index("## Layout")]))
    rooms = [p for folder in ("stages/lib", "stages/report", "stages/tasks/common")
             for p in (ROOT / folder).rglob("*.py")
             if p.stem != "__init__" and "__pycache__" not in p.parts]
    rooms += [p for p in (ROOT / "stages").glob("*.py") if p.stem != "__init__"]
    rooms += [p for p in (ROOT / "stages/tasks").iterdir() if (p / "__init__.py").is_file()]
    missing = sorted(p.relative_to(ROOT).as_posix() for p in rooms if p.stem not in words)
    assert not missing, f"not in docs/pipeline.md's picture: {missing}"
