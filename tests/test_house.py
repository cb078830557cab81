"""The house rules a newcomer relies on: no module over MAX_LINES lines as `ruff format` lays it out
at 120 columns, no `**kwargs` passed through, no function of more than MAX_PARAMETERS parameters and
no record built from more than MAX_POSITIONAL positional arguments (data travels as named records)."""

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 450
MAX_PARAMETERS = 6
MAX_POSITIONAL = 4
#: functions whose parameters are fixed by something other than us: the public front doors keep
#: the signatures users call (autotune.lookup, autotune.matmul), a Typer command takes one
#: parameter per option, a Triton kernel its launch arguments
WIDE_BY_CONTRACT = {
    "autotune/select/lookup.py": {"lookup"},
    "autotune/call/front.py": {"matmul"},
    "autotune/bench/triton_peer.py": {"_matmul_kernel"},
}
MODULES = sorted(p for folder in ("autotune", "kernels") for p in (ROOT / folder).rglob("*.py"))


def formatted_lines(paths: list[Path], scratch: Path) -> dict[Path, int]:
    """Each module's lines as `ruff format` lays it out at 120 columns: copies formatted in one run."""
    copies = {path: scratch / str(path.relative_to(ROOT)) for path in paths}
    for path, copy in copies.items():
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text())
    subprocess.run([sys.executable, "-m", "ruff", "format", "--no-cache", "--isolated", "--line-length", "120",
                    str(scratch)], capture_output=True, text=True, check=True)
    return {path: len(copy.read_text().splitlines()) for path, copy in copies.items()}


def test_no_module_is_longer_than_a_newcomer_reads_at_once(tmp_path):
    long = [f"{path.relative_to(ROOT)}: {count} lines" for path, count in formatted_lines(MODULES, tmp_path).items()
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


def device_function(node: ast.FunctionDef) -> bool:
    """A function compiled for the GPU (`@cuda.jit(device=True)`): Numba passes it scalars and
    arrays, not records."""
    return any("cuda.jit" in ast.unparse(decorator) for decorator in node.decorator_list)


def cli_command(node: ast.FunctionDef) -> bool:
    return any(ast.unparse(decorator).startswith("command") for decorator in node.decorator_list)


def wide_functions(source: str, exempt: frozenset = frozenset()) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        count = len([a for a in arguments if a.arg not in ("self", "cls")])
        if count > MAX_PARAMETERS and not (device_function(node) or cli_command(node) or node.name in exempt):
            found.append(f"{node.name} ({count} parameters)")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_function_takes_more_than_a_few_parameters(path):
    assert not wide_functions(path.read_text(), frozenset(WIDE_BY_CONTRACT.get(str(path.relative_to(ROOT)), ())))


#: classes of ours whose constructor's signature is another library's
BORROWED_SIGNATURES = {"BarrierThread": "numba's simulator BlockThread(f, manager, blockIdx, threadIdx, debug)"}


@functools.cache
def records() -> set[str]:
    """Every class autotune/ and kernels/ define (parsed when a test first asks, not at collection)."""
    return {node.name for path in MODULES for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ClassDef)} - set(BORROWED_SIGNATURES)


def positional_records(source: str, records: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and len(node.args) > MAX_POSITIONAL:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in records:
                found.append(f"{name}(...) at line {node.lineno}")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_record_is_built_from_many_positional_arguments(path):
    assert not positional_records(path.read_text(), records())


def test_the_checks_catch_what_they_forbid():
    source = ("@cuda.jit(device=True)\ndef kernel(a, b, c, d, e, f, g): pass\n"
              "def host(a, b, c, d, e, f, g): return Row(a, b, c, d, e)\n"
              "def fine(a, b, c, d, e, f): return Row(a, b, c, d, e=e)\n")
    assert wide_functions(source) == ["host (7 parameters)"]
    assert wide_functions(source, frozenset({"host"})) == []
    assert positional_records(source, {"Row"}) == ["Row(...) at line 3"]
