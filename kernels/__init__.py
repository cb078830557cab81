"""Parameterized Numba CUDA matmul kernel families: C = A @ B for any M, N, K.

Every module of this package that defines `FAMILY` (a kernels.base.Family) is a family; see
kernels.base for the contract. FAMILIES lists them in the order a cold study tries their defaults.

Importing the package loads only its numba-free rules (kernels.rules), so that the kernel store
and the driver launch share them without importing numba; the families, their registry and
kernels.base load on first use of a name that needs them.
"""

from __future__ import annotations

import importlib
import os

from .rules import DTYPE_NAMES, LAYOUTS, GridTooLarge, check_layout, grid_of, offset_bits_for, unaligned_for

#: the environment variable that registers families outside this package: `module[,module...]`,
#: each an importable module that defines FAMILY (the contract: kernels.contract)
FAMILIES_VARIABLE = "MMTUNE_FAMILIES"


def outside_families() -> list[str]:
    """The modules FAMILIES_VARIABLE names (kernels.registry imports them; the kernel store hashes them)."""
    return [name.strip() for name in os.environ.get(FAMILIES_VARIABLE, "").split(",") if name.strip()]
#: the mark autotune looks for in this file: PyPI's `kernels` distribution installs another top-level `kernels`
__mmtune__ = True

_REGISTRY = ("FAMILIES", "family", "build", "build_for", "source_hash", "source_hashes")
_CONTRACT = ("Config", "DeviceLimits", "Family")
_BASE = ("DTYPES", "Kernel")


def __getattr__(name: str):
    if name in _REGISTRY:
        return getattr(importlib.import_module(f"{__name__}.registry"), name)
    if name in _CONTRACT:
        return getattr(importlib.import_module(f"{__name__}.contract"), name)
    if name in _BASE:
        return getattr(importlib.import_module(f"{__name__}.base"), name)
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as error:
        if error.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


__all__ = [
    "DTYPES", "DTYPE_NAMES", "FAMILIES", "LAYOUTS", "Config", "DeviceLimits", "Family", "GridTooLarge", "Kernel",
    "build", "build_for", "check_layout", "family", "grid_of", "offset_bits_for", "source_hash", "source_hashes",
    "unaligned_for",
]
