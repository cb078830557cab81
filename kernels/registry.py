"""The families found, built and hashed: what `kernels.FAMILIES`, `kernels.build` and
`kernels.source_hash` give (kernels/__init__.py loads this module on first use, as it imports
numba)."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import pkgutil
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

from . import FAMILIES_VARIABLE, base, intrinsics, outside_families, tiles
from .base import Family, Kernel
from .rules import DTYPE_NAMES, check_layout, offset_bits_for, unaligned_for



def _discover() -> dict[str, Family]:
    """The families of this package's modules and of the modules FAMILIES_VARIABLE names, in the
    order a cold study tries their defaults."""
    found = []
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        module = importlib.import_module(f"{__package__}.{info.name}")
        entry = getattr(module, "FAMILY", None)
        if isinstance(entry, Family):
            found.append(entry)
    for name in outside_families():
        entry = getattr(importlib.import_module(name), "FAMILY", None)
        if not isinstance(entry, Family):
            raise ImportError(f"{FAMILIES_VARIABLE} names {name}, which defines no FAMILY = kernels.base.Family(...)")
        if not any(entry is known for known in found):
            found.append(entry)
    names = [entry.name for entry in found]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"more than one family is named {', '.join(map(repr, twice))}")
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
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"unsupported dtype {dtype!r}; supported: {', '.join(DTYPE_NAMES)}")
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
    used = [value for value in vars(module).values() if isinstance(value, ModuleType) and value.__name__.startswith(__package__)]
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
            if source is not None and source.__name__.startswith(f"{__package__}.") and source.__name__ not in found:
                found[source.__name__] = source
                todo.append(source)
    found.pop(module.__name__, None)
    return [found[name] for name in sorted(found)]


def source_hashes() -> dict[str, str]:
    """Every family's source hash: what a row's `source_hash` must equal to be fresh."""
    return {name: source_hash(name) for name in FAMILIES}
