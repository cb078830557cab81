"""Parameterized Numba CUDA matmul kernel families: C = A @ B for any M, N, K.

Every module of this package that defines `FAMILY` (a kernels.base.Family) is a family; see
kernels.base for the contract. FAMILIES lists them in the order a cold study tries their defaults.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import pkgutil
import sys
from functools import cache
from types import ModuleType

from . import base, intrinsics, tiles
from .base import (
    DTYPES, LAYOUTS, Config, DeviceLimits, Family, GridTooLarge, Kernel, check_layout, grid_of, offset_bits_for,
    unaligned_for,
)

#: the mark autotune looks for in this file: PyPI's `kernels` distribution installs another top-level `kernels`
__mmtune__ = True


def _discover() -> dict[str, Family]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        entry = getattr(module, "FAMILY", None)
        if isinstance(entry, Family):
            found.append(entry)
    return {entry.name: entry for entry in sorted(found, key=lambda e: (e.first_guess, e.name))}


FAMILIES: dict[str, Family] = _discover()


def family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown kernel family {name!r}; known: {', '.join(FAMILIES)}") from None


def build(name: str, config: dict, dtype: str, layout: str = "NN", offset_bits: int = 32,
          unaligned: str = "") -> Kernel:
    """The kernel of family `name` and `config` for `dtype`, taking A and B as `layout` says
    (LAYOUTS), with `offset_bits`-bit element offsets (offset_bits_for), built for the operands
    named in `unaligned` ("A", "B", "C") having rows that are not 16-byte aligned (the kernel's
    `unaligned` says which of them that changed)."""
    if dtype not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; supported: {', '.join(DTYPES)}")
    if offset_bits not in (32, 64):
        raise ValueError(f"offset_bits must be 32 or 64, got {offset_bits!r}")
    if set(unaligned) - {"A", "B", "C"}:
        raise ValueError(f"unaligned names operands A, B and C, got {unaligned!r}")
    return family(name).build(config, dtype, check_layout(layout), offset_bits, unaligned)


def build_for(name: str, config: dict, dtype: str, shape: tuple[int, int, int], layout: str = "NN") -> Kernel:
    """The kernel of family `name` and `config` as a product of `shape` (M, N, K) in `layout`
    needs it: the offsets its operands' sizes need and the moves their rows' alignment allows."""
    return build(name, config, dtype, layout, offset_bits_for(*shape), unaligned_for(*shape, layout, dtype))


@cache
def source_hash(name: str) -> str:
    """A hash of the family's source and of the shared modules and families it builds on: a
    cached config whose hash differs was measured on other code."""
    module = sys.modules[family(name).build.__module__]
    used = [value for value in vars(module).values() if isinstance(value, ModuleType) and value.__name__.startswith(__name__)]
    known = {m.__name__ for m in (module, *used, base, intrinsics, tiles)}
    more = [m for m in _modules_used(module) if m.__name__ not in known]  # names imported from them
    text = "".join(inspect.getsource(m) for m in (module, *used, base, intrinsics, tiles, *more))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _modules_used(module: ModuleType) -> list[ModuleType]:
    """The modules of this package that `module` uses, directly or through others, as modules
    or by names imported from them, in name order."""
    found, todo = {}, [module]
    while todo:
        for value in vars(todo.pop()).values():
            source = value if isinstance(value, ModuleType) else sys.modules.get(getattr(value, "__module__", None) or "")
            if source is not None and source.__name__.startswith(f"{__name__}.") and source.__name__ not in found:
                found[source.__name__] = source
                todo.append(source)
    found.pop(module.__name__, None)
    return [found[name] for name in sorted(found)]


def source_hashes() -> dict[str, str]:
    """Every family's source hash: what a row's `source_hash` must equal to be fresh."""
    return {name: source_hash(name) for name in FAMILIES}


__all__ = [
    "DTYPES", "FAMILIES", "LAYOUTS", "Config", "DeviceLimits", "Family", "GridTooLarge", "Kernel", "build",
    "build_for", "family", "grid_of", "offset_bits_for", "source_hash", "source_hashes", "unaligned_for",
]
