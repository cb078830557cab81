"""Products of a few rows through the `gemv` family (B streamed once), against lookup's pick (the
few-rows rule's 16-row tile when the study ran; the rule's gemv config since) and cuBLAS, with B's rows in memory (NN) and B's columns (NT, as in
x @ W.T).

    [GEMV_LAYOUTS="NN NT"] [GEMV_TILES="16x256x4 ..."] python3 studies/step34_gemv.py --out gemv.json --shapes 1x4096x1024 8x4096x4096

Jobs at each shape and layout: lookup's pick, and `gemv` with ROWS (the next power of 2 of M, at
most 16) and each of TILES (cols, threads, unroll) with K split 1 to 128 ways. Built, checked and
timed and printed by studies/step33_rows.py's `main` (driver plans, CUDA graphs, cuBLAS on the
same tensors; a shape's results under "MxNxK LAYOUT" where the layout is not NN). The first run
(`studies/h200/step34/gemv/`) wrote a list of shapes, each with its layout, instead.
"""

from __future__ import annotations

import os

from step23_table import job  # studies/, the script's folder
from step33_rows import H200, main

from autotune.space import DeviceLimits, infeasibility

TILES = [(64, 256, 4), (128, 256, 4), (32, 256, 4), (256, 256, 4), (64, 128, 4), (128, 512, 4), (64, 256, 2)]
if os.environ.get("GEMV_TILES"):  # e.g. "16x256x4 16x512x4": cols x threads x unroll
    TILES = [tuple(map(int, tile.split("x"))) for tile in os.environ["GEMV_TILES"].split()]
SPLITS = [1, 2, 4, 8, 16, 32, 64, 128]


def candidates(shape: tuple, layout: str) -> list[dict]:
    from autotune.runtime import lookup

    limits, m = DeviceLimits.for_cc("9.0"), shape[0]
    choice = lookup(*shape, "float32", H200, layout)
    jobs = [{**job(choice.family, choice.config, "float32", shape, f"lookup ({choice.source})"), "lookup": True}]
    rows = min(16, 1 << (m - 1).bit_length())
    for (cols, threads, unroll), splits in [(tile, s) for tile in TILES for s in SPLITS]:
        params = {"rows": rows, "cols": cols, "threads": threads, "unroll": unroll, "splits": splits}
        if infeasibility("gemv", params, "float32", limits) is None:
            jobs.append(job("gemv", params, "float32", shape, "gemv"))
    return [{**j, "layout": layout} for j in jobs]


if __name__ == "__main__":
    main(lambda shape: [j for layout in os.environ.get("GEMV_LAYOUTS", "NN NT").split() for j in candidates(shape, layout)])
