"""`mmtune warm --recorded FILE`: build ahead of time, into the kernel store, the kernels the call
path would load for the products a program called (autotune.record), for the GPU each was
recorded on. Each product is served as `matmul` serves it there (front.find_entry: the store's
memory of the shape, else lookup for that GPU, which the store then remembers), C's peeled last
rows too; so a later run's first call of it loads its kernel without compiling or asking lookup.
Compiling needs NVVM and nvJitLink, not a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from autotune.call.front import find_entry
from autotune.errors import StoreError
from autotune.store import recorded
from autotune.store.recorded import Recorded
from kernels.rules import peeled_rows


@dataclass(frozen=True)
class Prebuilt:
    """A recorded product's kernels in the store (their keys), or why it has none."""

    product: Recorded
    keys: tuple[str, ...] = ()
    error: str | None = None


def warm_recorded(path: Path | str) -> list[Prebuilt]:
    """Build the kernels of every product in the file at `path`; a product recorded under the
    simulator (no architecture) or one that fails to compile is reported, not raised."""
    return [_prebuild(product) for product in recorded.read(path)]


def _prebuild(product: Recorded) -> Prebuilt:
    if not product.cc:
        return Prebuilt(product, error="recorded under the simulator: no architecture to build for")
    try:
        served = find_entry(product.gpu, product.problem, product.deterministic, bias=product.bias)
        keys = [served.entry.key]
        rest = peeled_rows(product.m, served.config.params, product.layout)
        if rest:
            keys.append(find_entry(product.gpu, replace(product.problem, m=rest), product.deterministic,
                                   bias=product.bias).entry.key)
    except (StoreError, ValueError, OSError) as error:
        return Prebuilt(product, error=str(error).splitlines()[0])
    return Prebuilt(product, tuple(keys))
