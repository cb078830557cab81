"""Parameterized Numba CUDA matmul kernel families: C = A @ B for any M, N, K.

Each family module holds its search space as data (SPACE, DEFAULT), a restriction function and a
factory; see kernels.base for the contract.
"""

from __future__ import annotations

import hashlib
import inspect
from functools import cache
from types import ModuleType

from . import base, intrinsics, naive, register, shared, splitk, tiles, vector
from .base import DTYPES, DeviceLimits, Kernel, OperandError, check_operands

#: the mark autotune looks for in this file: PyPI's `kernels` distribution installs another top-level `kernels`
__mmtune__ = True

FAMILIES: dict[str, ModuleType] = {"naive": naive, "shared": shared, "register": register, "vector": vector, "splitk": splitk}


def family(name: str) -> ModuleType:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown kernel family {name!r}; known: {', '.join(FAMILIES)}") from None


def build(name: str, config: dict, dtype: str) -> Kernel:
    if dtype not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; supported: {', '.join(DTYPES)}")
    return family(name).build(config, dtype)


@cache
def source_hash(name: str) -> str:
    """A hash of the family's source and of the shared modules and families it builds on: a
    cached config whose hash differs was measured on other code."""
    module = family(name)
    used = [value for value in vars(module).values() if isinstance(value, ModuleType) and value.__name__.startswith(__name__)]
    text = "".join(inspect.getsource(m) for m in (module, *used, base, intrinsics, tiles))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


__all__ = ["DTYPES", "FAMILIES", "DeviceLimits", "Kernel", "OperandError", "build", "check_operands", "family", "source_hash"]
