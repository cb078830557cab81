"""The code reads as the pipeline (autotune.stages): no module imports a later stage, and no
imports go round in a circle. Every import counts: at module level, inside functions, and
importlib.import_module calls with a literal name."""

import ast
import functools
from pathlib import Path

import pytest

from autotune.stages import STAGES, stage_of

ROOT = Path(__file__).resolve().parent.parent
ORDER = {name: index for index, (name, _) in enumerate(STAGES)}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    files = sorted((ROOT / "autotune").rglob("*.py")) + sorted((ROOT / "kernels").rglob("*.py"))
    return {module_name(path): path for path in files}


MODULES = all_modules()


def resolve(importer: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = importer.split(".") if path.name == "__init__.py" else importer.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str, path: Path) -> set[str]:
    """The internal modules `name` imports, wherever in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = resolve(name, path, node)
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in MODULES else module
                       for alias in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            targets = [node.args[0].value]
        for target in targets:
            while target and target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in MODULES and target != name:
                found.add(target)
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    """Each module's internal imports (parsed when a test first asks, not at collection)."""
    return {name: imports_of(name, path) for name, path in MODULES.items()}


def test_every_module_belongs_to_a_stage():
    for name in MODULES:
        stage_of(name)


def test_no_module_imports_a_later_stage():
    late = [f"{name} ({stage_of(name)}) imports {target} ({stage_of(target)})"
            for name, targets in graph().items() for target in sorted(targets)
            if ORDER[stage_of(target)] > ORDER[stage_of(name)]]
    assert not late, "\n".join(late)


def test_no_imports_go_round_in_a_circle():
    index, low, stack, on_stack, circles, edges = {}, {}, [], set(), [], graph()

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert not circles, circles


@pytest.mark.parametrize("source, expected", [
    ("import autotune.select.lookup", {"autotune.select.lookup"}),
    ("def f():\n    from autotune.call import front", {"autotune.call.front"}),
    ("import importlib\nimportlib.import_module('autotune.bench.peers')", {"autotune.bench.peers"}),
    ("from autotune.store.cache import Cache", {"autotune.store.cache"}),
])
def test_the_reader_sees_every_kind_of_import(tmp_path, source, expected):
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert imports_of("autotune.space.probe", path) == expected
