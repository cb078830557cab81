"""Which config a shape uses, without asking lookup: `shapes/` in the kernel store remembers,
per (GPU model, dtype, shape, layout, precision), the config lookup chose, stamped with the
cache file's mtime and size. A fresh process whose cache has not changed since finds its
kernel without asking lookup (which imports numba); a changed cache makes it ask again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from autotune.space.precision import PRECISIONS, allows
from autotune.space.problem import Problem
from autotune.store.cubins import BuildKey, Entry, directory, get
from autotune.store.paths import write_atomically
from autotune.store.rows import Row
from kernels import Config
from kernels.rules import Arch


def keep(row: Row, root: Path | None = None, rivals: tuple[Row, ...] = ()) -> Entry | None:
    """Store the kernel of a cache row (a tuned winner) for its GPU's architecture and layout, and
    remember its shape's config for each precision a lookup may ask for (remember_preferred, with
    `rivals`: rows of the same GPU model, dtype, shape and layout in other precisions). None for
    rows with no architecture (the simulator's)."""
    if not row.cc:
        return None
    entry = get(BuildKey.of(row.config, row.dtype, row.shape, row.layout, Arch.of(row.cc)), root)
    remember_preferred([row, *rivals], root)
    return entry


def remember_preferred(rows: list[Row], root: Path | None = None) -> None:
    """Remember, for each precision a lookup may ask for, the config of the row of `rows` (of one
    GPU model, dtype, shape and layout) that lookup prefers among those of precisions it allows:
    the current one, else the faster (autotune.store.rows.replaces)."""
    import kernels
    from autotune.store.rows import replaces

    hashes = kernels.source_hashes()
    for asked in PRECISIONS:
        preferred = None
        for row in rows:
            if allows(asked, row.precision, row.k) and (preferred is None or replaces(row, preferred, hashes)):
                preferred = row
        if preferred is not None:
            remember(replace(rows[0].problem, precision=asked), preferred.config, root)


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


def _shape_path(problem: Problem, root: Path | None) -> Path:
    asked = [problem.device, problem.dtype, list(problem.shape), problem.layout, problem.precision]
    name = hashlib.sha256(json.dumps(asked).encode()).hexdigest()[:32]
    return (root or directory()) / "shapes" / f"{name}.json"


def remember(problem: Problem, config: Config, root: Path | None = None, stamp: list | None = None) -> None:
    """Remember the config a lookup gives `problem`, valid while the cache stays as `stamp` (taken
    before the config was looked up; default now)."""
    record = {"device": problem.device, "dtype": problem.dtype, "shape": list(problem.shape), "layout": problem.layout,
              "precision": problem.precision, "family": config.family, "config": config.params,
              "cache": cache_stamp() if stamp is None else stamp}
    write_atomically(_shape_path(problem, root), json.dumps(record).encode())


def recall(problem: Problem, root: Path | None = None) -> Config | None:
    """The config remembered for `problem` while the cache file stayed as it was, else None."""
    try:
        record = json.loads(_shape_path(problem, root).read_text())
        asked = [problem.device, problem.dtype, list(problem.shape), problem.layout, problem.precision]
        same = [record["device"], record["dtype"], record["shape"], record["layout"], record["precision"]] == asked
        if same and record["cache"] == cache_stamp() and isinstance(record["config"], dict):
            return Config.of(record["family"], record["config"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None
