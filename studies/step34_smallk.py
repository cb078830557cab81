"""Products with a short K (K <= 128: a tile's few k-steps, then C's stores): which tiles of
the `vector` family serve them, against lookup's pick (the measured table's vote).

    python3 studies/step34_smallk.py --out smallk.json --shapes 1800x900x64 2400x1200x48

Jobs at each shape: lookup's pick, the measured table's where lookup took another, and every feasible `vector` tile with BM and BN of 32, 64 or
128, BK 16 or 32, TM and TN 4 or 8, copied through registers (1 or 2 shared tiles) or by 2 or 3
`cp.async` stages. With SMALLK_GRID=focused, the first run's best: BM x BN of 64x64, 32x128,
64x128 or 128x64, TM 8, TN 4, BK 8 or 16, through registers. Built, checked and timed as studies/step33_rows.py does (driver plans, CUDA
graphs, cuBLAS on the same tensors).
"""

from __future__ import annotations

import itertools
import os

from step23_table import job  # studies/, the script's folder
from step33_rows import H200, main

from autotune.space import DeviceLimits, infeasibility

BASE = {"pad": 4, "unroll": True, "fragments": 1, "wide_fetch": True, "min_blocks": 1}
PIPELINES = ({"async_copy": False, "stages": 1}, {"async_copy": False, "stages": 2},
             {"async_copy": True, "stages": 2}, {"async_copy": True, "stages": 3})


GRIDS = {
    "wide": [dict(bm=bm, bn=bn, bk=bk, tm=tm, tn=tn, **pipeline) for bm, bn, bk, tm, tn, pipeline in itertools.product(
        (32, 64, 128), (32, 64, 128), (16, 32), (4, 8), (4, 8), PIPELINES)],
    "focused": [dict(bm=bm, bn=bn, bk=bk, tm=8, tn=4, **pipeline) for (bm, bn), bk, pipeline in itertools.product(
        ((64, 64), (32, 128), (64, 128), (128, 64)), (8, 16), PIPELINES[:2])],
}


def tiles() -> list[dict]:
    limits, found = DeviceLimits.for_cc("9.0"), []
    for params in GRIDS[os.environ.get("SMALLK_GRID", "wide")]:
        tile = {**BASE, **params}
        if infeasibility("vector", tile, "float32", limits) is None:
            found.append(tile)
    return found


def candidates(shape: tuple) -> list[dict]:
    from autotune.runtime import _measured, lookup

    choice = lookup(*shape, "float32", H200)
    jobs = [{**job(choice.family, choice.config, "float32", shape, f"lookup ({choice.source})"), "lookup": True}]
    table = _measured(*shape, "float32", H200, deterministic=False)
    if table is not None and (table.family, table.config) != (choice.family, choice.config):
        jobs.append(job(table.family, table.config, "float32", shape, "table"))
    return jobs + [job("vector", tile, "float32", shape, "small-k") for tile in tiles()]


if __name__ == "__main__":
    main(candidates)
