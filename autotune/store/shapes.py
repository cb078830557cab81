"""Which config a shape uses, without asking lookup: `shapes/` in the kernel store remembers,
per (GPU model, dtype, shape, layout, precision), the config lookup chose, stamped with the
cache file's mtime and size. A fresh process whose cache has not changed since finds its
kernel without asking lookup (which imports numba); a changed cache makes it ask again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from autotune.space.precision import PRECISIONS, allows, of_row
from autotune.store.cubins import Entry, directory, get, parse_arch
from autotune.store.paths import write_atomically
from kernels.rules import offset_bits_for, unaligned_for


def keep(row: dict, root: Path | None = None, rivals: tuple[dict, ...] = ()) -> Entry | None:
    """Store the kernel of a cache row (a tuned winner) for its GPU's architecture and layout, and
    remember its shape's config for each precision a lookup may ask for (remember_preferred, with
    `rivals`: rows of the same GPU model, dtype, shape and layout in other precisions). None for
    rows with no architecture (the simulator's)."""
    if not row.get("cc"):
        return None
    shape, layout = (row["m"], row["n"], row["k"]), row.get("layout") or "NN"
    entry = get(row["family"], row["params"], row["dtype"], parse_arch(row["cc"]), root, layout, offset_bits_for(*shape),
                unaligned_for(*shape, layout, row["dtype"]))
    remember_preferred([row, *rivals], root)
    return entry


def remember_preferred(rows: list[dict], root: Path | None = None) -> None:
    """Remember, for each precision a lookup may ask for, the config of the row of `rows` (of one
    GPU model, dtype, shape and layout) that lookup prefers among those of precisions it allows:
    the current one, else the faster (autotune.store.cache.replaces)."""
    import kernels
    from autotune.store.cache import replaces

    hashes = kernels.source_hashes()
    first = rows[0]
    shape, layout = (first["m"], first["n"], first["k"]), first.get("layout") or "NN"
    for asked in PRECISIONS:
        preferred = None
        for row in rows:
            if allows(asked, of_row(row)) and (preferred is None or replaces(row, preferred, hashes)):
                preferred = row
        if preferred is not None:
            remember(first["device"], first["dtype"], shape, preferred["family"], preferred["params"], root,
                     layout=layout, precision=asked)


def cache_stamp() -> list | None:
    """(mtime, size) of the cache file and of its write-ahead log (a committed write changes only
    the log until SQLite checkpoints it); a change means lookup may now choose differently."""
    from autotune.store.paths import cache_file

    path = cache_file()
    stamp = []
    for part in (path, path.with_name(path.name + "-wal")):
        try:
            stat = part.stat()
        except OSError:
            stat = None
        stamp.append([stat.st_mtime_ns, stat.st_size] if stat else None)
    return stamp if stamp[0] else None


def _shape_path(device: str, dtype: str, shape: tuple[int, int, int], root: Path | None, layout: str,
                precision: str) -> Path:
    name = hashlib.sha256(json.dumps([device, dtype, list(shape), layout, precision]).encode()).hexdigest()[:32]
    return (root or directory()) / "shapes" / f"{name}.json"


def remember(device: str, dtype: str, shape: tuple[int, int, int], family: str, config: dict,
             root: Path | None = None, stamp: list | None = None, layout: str = "NN", precision: str = "ieee") -> None:
    """Remember the config a lookup of `precision` gives a shape in a layout, valid while the cache
    stays as `stamp` (taken before the config was looked up; default now)."""
    record = {"device": device, "dtype": dtype, "shape": list(shape), "layout": layout, "precision": precision,
              "family": family, "config": config, "cache": cache_stamp() if stamp is None else stamp}
    write_atomically(_shape_path(device, dtype, shape, root, layout, precision), json.dumps(record).encode())


def recall(device: str, dtype: str, shape: tuple[int, int, int], root: Path | None = None,
           layout: str = "NN", precision: str = "ieee") -> tuple[str, dict] | None:
    """(family, config) remembered for this shape, layout and precision while the cache file
    stayed as it was, else None."""
    try:
        record = json.loads(_shape_path(device, dtype, shape, root, layout, precision).read_text())
        asked = [device, dtype, list(shape), layout, precision]
        same = [record["device"], record["dtype"], record["shape"], record["layout"], record["precision"]] == asked
        if same and record["cache"] == cache_stamp() and isinstance(record["config"], dict):
            return record["family"], record["config"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None
