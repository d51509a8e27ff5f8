"""A stage's code, read from its imports: the project files `python -m stages.<stage>` can run for
a task, found with Python's ast. dvc.yaml's code deps must cover them (tests/test_codedeps.py),
and the checkpoint and export fingerprints hash them, so no list of code files is kept by hand.

Every import counts, wherever it stands (module level or inside a function, `import a.b`, `from
a import b`, relative ones), and so does a module named as text to importlib.import_module or
__import__. A name built from the task (f"stages.tasks.{name}") is the chosen task's module; a
name looked up in a module-level dict of module names (`import_module(MODALITIES[name])`) is
every module the dict names, since the key is only known at run time. A
package's __init__.py counts when a module under it is reached, unless it holds nothing but its
docstring (it runs no code, so it cannot change an out).
"""
import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the project's root: the folder holding stages/
PACKAGES = ("stages", "tools", "bench")
STRING_IMPORTS = ("import_module", "__import__")  # importlib.import_module, __import__
STAGES = ("sample", "ingest", "validate", "split", "prepare", "train", "evaluate", "export",
          "report")


def modules(root: Path = ROOT, packages=PACKAGES) -> dict[str, Path]:
    """{dotted name: file} of every module of the project's packages."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def named_module(node, task: str | None = None) -> str | None:
    """The module a call imports by name as text (`importlib.import_module("a.b")`,
    `import_module(...)`, `__import__("a.b")`), else None. Of an f-string: with `task`, its
    leading text followed by the task's name (f"stages.tasks.{name}": stages.tasks.<task>);
    without, its leading text up to the last dot (stages.tasks). A relative name is left out."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if called not in STRING_IMPORTS or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        text = arg.value
    elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        lead = str(arg.values[0].value)
        text = lead + task if task and lead.endswith(".") else lead.rpartition(".")[0]
    else:
        return None
    return text if text and not text.startswith(".") else None


def name_tables(tree: ast.Module) -> dict[str, list[str]]:
    """{name: its values} of every module-level dict whose values are all text (`MODALITIES =
    {"image": "stages.lib.modality.image", ...}`)."""
    out = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and node.value.values
                and all(isinstance(v, ast.Constant) and isinstance(v.value, str)
                        for v in node.value.values)):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = [v.value for v in node.value.values]
    return out


def looked_up(node: ast.Call, tables: dict[str, list[str]]) -> list[str]:
    """The modules a call imports by a name looked up in one of the module's dicts of module
    names (`importlib.import_module(MODALITIES[name])`): every value of the dict."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if called not in STRING_IMPORTS or not node.args:
        return []
    arg = node.args[0]
    if isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name):
        return list(tables.get(arg.value.id, []))
    return []


def imports(name: str, path: Path, known, task: str | None = None) -> list[tuple[str, int]]:
    """(imported project module, line) of every import in the file, wherever it stands: `from
    a.b import c` is module a.b.c when that is a module, else a.b; a module named as text to
    importlib.import_module or __import__ is imported too (named_module), and so is every module
    a dict of module names holds when the call looks its name up there (looked_up)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    tree = ast.parse(path.read_text(), str(path))
    tables = name_tables(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            named = named_module(node, task)
            targets = [named] if named else looked_up(node, tables)
        elif isinstance(node, ast.Import):
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


def runs_code(path: Path) -> bool:
    """False for a file that holds nothing but a docstring (an empty package __init__.py)."""
    body = ast.parse(path.read_text(), str(path)).body
    return any(not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) for s in body)


def entry(stage: str) -> str:
    """The module `python -m stages.<stage>` runs."""
    return "stages.report.__main__" if stage == "report" else f"stages.{stage}"


@functools.lru_cache(maxsize=64)
def reach(stage: str, task: str, root: Path = ROOT) -> tuple[str, ...]:
    """The project files (paths relative to root, sorted) that `python -m stages.<stage>` can run
    with `task: <task>`: its module, every module it imports, transitively, and the __init__.py
    of each package on the way that runs code."""
    known = modules(root, ("stages",))
    start = entry(stage)
    if start not in known:
        raise KeyError(f"no module {start} under {root}")
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # the packages above
        todo.extend(t for t, _ in imports(name, known[name], known, task))
    files = {known[n] for n in seen}
    return tuple(sorted(f.relative_to(root).as_posix() for f in files
                        if f.name != "__init__.py" or runs_code(f)))


def code_hash(stage: str, task: str, root: Path = ROOT) -> str:
    """sha256 over the (path, sha256) of every file the stage reaches for the task."""
    import hashlib

    total = hashlib.sha256()
    for rel in reach(stage, task, root):
        digest = hashlib.sha256((root / rel).read_bytes()).hexdigest()
        total.update(f"{rel}\0{digest}\n".encode())
    return total.hexdigest()
