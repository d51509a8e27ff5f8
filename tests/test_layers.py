"""The house's floors (ARCHITECTURE.md): every import under stages/, tools/ and bench/, read with
ast (function-level imports included), points down or sideways, never up, and no modules import
each other in a cycle.

Floors, from the ground up: stages/lib; stages/report (the report's helpers); stages/tasks (a
task's report sections use those helpers); the stage modules (stages/<stage>.py and
`python -m stages.report`); tools/; bench/.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("stages", "tools", "bench")
FLOORS = ("lib", "report", "tasks", "stage", "tools", "bench")


def modules() -> dict[str, Path]:
    """{dotted name: file} of every module of the project's packages."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


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


def imports(name: str, path: Path, known) -> list[tuple[str, int]]:
    """(imported project module, line) of every import in the file, wherever it stands: `from
    a.b import c` is module a.b.c when that is a module, else a.b."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target and target != name:
                out.append((target, node.lineno))
    return out


def graph() -> dict[str, list[tuple[str, int]]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_no_module_imports_a_floor_above_its_own():
    allowed = {  # what each floor may import besides itself
        "lib": set(),
        "report": {"lib"},
        "tasks": {"lib", "report"},
        "stage": {"lib", "report", "tasks"},
        "tools": {"lib", "report", "tasks", "stage"},
        "bench": {"lib", "report", "tasks", "stage", "tools"},
    }
    upward = sorted(f"{name} (line {line}, a {floor(name)} module) imports {target} "
                    f"({floor(target)})"
                    for name, edges in graph().items() for target, line in edges
                    if floor(target) != floor(name)
                    and floor(target) not in allowed[floor(name)])
    assert not upward, "imports pointing up a floor:\n" + "\n".join(upward)


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


@pytest.mark.parametrize("path, name", [("stages/train.py", "main"),
                                        ("stages/lib/loop.py", "fit"),
                                        ("tools/serve.py", "create_app")])
def test_the_once_longest_functions_are_split_into_named_steps(path, name):
    """train.main (231 lines), train.fit (147) and serve.create_app (159) were each at least
    twice the size of anything else; each is now a list of steps named for what they do."""
    tree = ast.parse((ROOT / path).read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    lines = node.end_lineno - node.lineno
    assert lines < 80, f"{path}: {name} spans {lines} lines"
