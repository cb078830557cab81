"""Each shared rule lives in one place, kernels/rules.py, which the kernels and the numba-free call
path both import."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kernels.rules

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "kernels" / "rules.py"
#: the values of CUDA's and the kernels' limits: written nowhere but in kernels/rules.py
LIMIT_LITERALS = ("2 ** 32", "2 ** 31 - 1", "48 * 1024")


def top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def sources():
    return [path for folder in ("autotune", "kernels") for path in sorted((ROOT / folder).rglob("*.py")) if path != RULES]


def test_each_rule_is_defined_once():
    rules = {name for name in top_level_names(ast.parse(RULES.read_text())) if not name.startswith("_")}
    again = [f"{path.relative_to(ROOT)} defines {name}" for path in sources()
             for name in sorted(top_level_names(ast.parse(path.read_text())) & rules)]
    assert not again, "\n".join(again)


def test_the_limits_are_written_once():
    again = [f"{path.relative_to(ROOT)}: {ast.unparse(node)}" for path in sources()
             for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.BinOp)
             and ast.unparse(node) in LIMIT_LITERALS]
    assert not again, "\n".join(again)


def test_the_rules_load_without_numba():
    code = "import sys, kernels.rules, kernels; kernels.LAYOUTS; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_call_path_loads_neither_numba_nor_the_families():
    code = ("import sys; from autotune.call import front; from autotune.backends import launch; "
            "from autotune.store import cubins, shapes; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'kernels')))")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip() == "['kernels', 'kernels.contract', 'kernels.rules']"  # both numba-free


def test_a_compute_capability_reads_every_way_it_is_written():
    Arch = kernels.rules.Arch
    assert {Arch.of("9.0"), Arch.of("sm_90"), Arch.of((9, 0)), Arch.of("90"), Arch.of(Arch(9, 0))} == {Arch(9, 0)}
    assert (str(Arch.of("sm_100")), Arch.of("10.0").sm, Arch.of("8.6").pair) == ("10.0", "sm_100", (8, 6))
    assert Arch.of("8.0") < Arch.of("8.6") < Arch.of("9.0") < Arch.of("10.0")
    sm90a = Arch(9, 0, "a")  # exactly sm_90's features (wgmma): its own target, apart from sm_90
    assert {Arch.of("9.0a"), Arch.of("sm_90a"), Arch.of("SM_90A"), Arch.of((9, 0, "a"))} == {sm90a} != {Arch(9, 0)}
    assert (str(sm90a), sm90a.sm, sm90a.pair, sm90a.target, Arch(9, 0).target) == ("9.0a", "sm_90a", (9, 0), (9, 0, "a"), (9, 0))
    with pytest.raises(ValueError, match="not a compute capability: 'sm_9x'"):
        Arch.of("sm_9x")
