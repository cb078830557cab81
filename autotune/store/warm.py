"""Build ahead of time: compile into the kernel store the kernels of the cached and shipped
rows of an architecture, with no GPU needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.store.cubins import StoreError
from autotune.store.rows import Row, replaces
from autotune.store.shapes import keep
from kernels.rules import Arch


@dataclass(frozen=True)
class Warmed:
    row: Row
    key: str | None
    error: str | None


def warm(arch: Arch, root: Path | None = None) -> list[Warmed]:
    """Compile into the store the kernels of the cache's and the shipped rows measured on GPUs of
    architecture `arch` (no GPU needed), and remember their shapes for those GPUs; of two rows for
    one GPU, dtype, shape, layout and precision, the one lookup prefers (the current one, else the
    faster), and of the rows of a shape in several precisions, the one each precision prefers."""
    import kernels
    from autotune.store.cache import Cache
    from autotune.store.records import shipped_rows

    cache = Cache()
    try:
        cached = cache.rows()
    finally:
        cache.close()
    hashes = kernels.source_hashes()
    rows = {}
    for row in shipped_rows(None, None) + cached:
        if row.cc == str(arch) and (row.key not in rows or replaces(row, rows[row.key], hashes)):
            rows[row.key] = row
    shapes: dict[tuple, list[Row]] = {}
    for key, row in rows.items():
        shapes.setdefault(key[:-1], []).append(row)  # the key without its precision
    done = []
    for same_shape in shapes.values():
        for row in same_shape:
            try:
                entry = keep(row, root, tuple(other for other in same_shape if other is not row))
                done.append(Warmed(row, entry.key, None))
            except (StoreError, ValueError) as error:
                done.append(Warmed(row, None, str(error).splitlines()[0]))
    return done
