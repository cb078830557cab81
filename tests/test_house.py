"""The house rules a newcomer relies on: no module over MAX_LINES lines as `ruff format` lays it out
at 120 columns, and no `**kwargs` passed through."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 450
MODULES = sorted(p for folder in ("autotune", "kernels") for p in (ROOT / folder).rglob("*.py"))


def formatted_lines(paths: list[Path]) -> dict[Path, int]:
    counts = {}
    for path in paths:
        done = subprocess.run([sys.executable, "-m", "ruff", "format", "--line-length", "120", "--stdin-filename",
                               str(path), "-"], input=path.read_text(), capture_output=True, text=True, check=True)
        counts[path] = len(done.stdout.splitlines())
    return counts


def test_no_module_is_longer_than_a_newcomer_reads_at_once():
    long = [f"{path.relative_to(ROOT)}: {count} lines" for path, count in formatted_lines(MODULES).items()
            if count > MAX_LINES]
    assert not long, "\n".join(long)


def takes_kwargs(node: ast.FunctionDef) -> bool:
    return node.args.kwarg is not None


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_function_takes_kwargs_to_pass_through(path):
    tree = ast.parse(path.read_text())
    found = [node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
             and takes_kwargs(node)]
    assert not found, found
