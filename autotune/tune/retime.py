"""Rows measured on older kernel code (their source hash differs from today's) are stale: what
they promise may no longer hold. Re-timing one measures its config again, at its shape on this
GPU with today's code, and writes the fresh row to the cache (replacing the stale one even if
slower, since its figure is the truth now). The runtime never does this inside `matmul`."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

import kernels
from autotune import backends
from autotune.measure.isolation import Isolated
from autotune.measure.measurement import measure, versions
from autotune.store import records
from autotune.store.cache import Cache
from autotune.store.rows import Row, stale
from autotune.tune.finalists import FINAL_LAUNCHES
from autotune.tune.workers import close_measurer


@dataclass(frozen=True)
class Retimed:
    old: Row  # the stale row
    new: Row | None  # the fresh row, or None if the config no longer runs or verifies
    error: str | None = None


def stale_rows(cache: Cache, device: str, dtype: str | None = None, shipped: bool = True) -> list[Row]:
    """Stale rows of this GPU model: the cache's, and the shipped records' where the cache has no
    current row for that shape."""
    hashes = kernels.source_hashes()
    cached = cache.rows(device, dtype)
    found = [r for r in cached if stale(r, hashes)]
    if shipped:
        current = {r.key for r in cached if not stale(r, hashes)}
        found += [r for r in records.shipped_rows(device, dtype) if stale(r, hashes) and r.key not in current]
    distinct = {}
    for row in found:  # a config stale in the cache and in the records is measured once
        distinct.setdefault((row.key, row.config), row)
    return list(distinct.values())


def retime_stale(cache: Cache | None = None, dtype: str | None = None, shipped: bool = True, measurer=None,
                 seed: int = 0, progress=None) -> list[Retimed]:
    """Re-time every stale row of this GPU model (see `stale_rows`) into the cache."""
    cache = cache or Cache()
    cache.check_writable()
    backends.require_gpu()
    device = backends.current().device()
    measurer = measurer or Isolated(measure)
    hashes = kernels.source_hashes()
    toolchain = versions()
    rng = np.random.default_rng(seed)
    done = []
    try:
        for row in stale_rows(cache, device.name, dtype, shipped):
            if progress is not None:
                progress(row)
            try:
                kernel = kernels.build_for(row.family, row.params, row.dtype, row.shape, row.layout)
                lock = str(cache.path.parent / "measure.lock")
                result = measurer(kernel, row.shape, rng, repeat=FINAL_LAUNCHES, lock=lock)
            except Exception as error:  # the config no longer builds or runs on today's code
                done.append(Retimed(row, None, f"{type(error).__name__}: {error}"))
                continue
            if not result.verification.ok:
                done.append(Retimed(row, None, f"wrong result: {result.verification.describe()}"))
                continue
            new = replace(
                row, device=device.name, cc=device.cc, sm_count=device.sm_count, driver=device.driver,
                gflops=result.gflops, median_ms=result.timing.median_ms, spread=result.timing.spread,
                source_hash=hashes[row.family], created=None, numba=toolchain["numba"],
                numba_cuda=toolchain["numba_cuda"],
            )
            cache.record(new, hashes)
            done.append(Retimed(row, new))
    finally:
        close_measurer(measurer)
    return done
