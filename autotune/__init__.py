"""mmtune: tune Numba CUDA matmul kernels per shape, cache the verified best, and use it.

    from autotune import matmul, lookup, clear, record

Importing the package loads nothing heavy: numba is imported on first use of `lookup`, or of
`matmul` when it has to compile or runs under the simulator, so NUMBA_ENABLE_CUDASIM (or
`mmtune --simulate`) can still be set before that.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from autotune.memos import clear

__all__ = ["matmul", "lookup", "clear", "record"]
KERNELS_MARK = "\n__mmtune__ = True"  # a line of mmtune's kernels/__init__.py


def _check_kernels() -> None:
    """mmtune's kernel families are the top-level package `kernels`, a name the PyPI distribution
    `kernels` installs too: refuse at once to run on another package of that name."""
    try:
        spec = importlib.util.find_spec("kernels")
    except ValueError:  # imported already, without a spec
        spec = None
    origin = spec.origin if spec else None
    try:
        ours = origin is not None and KERNELS_MARK in Path(origin).read_text(encoding="utf-8", errors="replace")
    except OSError:
        ours = False
    if ours:
        return
    beside = Path(__file__).resolve().parent.parent / "kernels" / "__init__.py"
    if origin is None and spec is not None and spec.submodule_search_locations:
        found = f"a namespace package at {', '.join(spec.submodule_search_locations)}"
    else:
        found = origin or ("a module without a spec" if spec is None and "kernels" in sys.modules else "nothing")
    expected = f"mmtune's is at {beside}" if beside.is_file() and str(beside) != origin else "mmtune's is missing or overwritten"
    raise ImportError(
        f"mmtune needs its own top-level package `kernels`, but `import kernels` finds {found}{_distribution()}; "
        f"{expected}. Uninstall the other (`pip uninstall kernels`) and reinstall mmtune, or use separate virtual environments"
    )


def _distribution() -> str:
    """Which installed distribution other than mmtune provides `kernels`, if one says so."""
    from importlib import metadata

    try:
        return f" (the PyPI distribution `kernels` {metadata.version('kernels')} installs a package of that name)"
    except metadata.PackageNotFoundError:
        return ""


_check_kernels()


def __getattr__(name: str):
    if name == "matmul":
        from autotune.call.front import matmul

        return matmul
    if name == "lookup":
        from autotune.select.lookup import lookup

        return lookup
    if name == "record":
        from autotune.call.recording import record

        return record
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
