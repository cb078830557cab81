"""The tile order's group height (kernels.base.GROUP_ROWS) against the shipped configs of large and mid shapes.

    python3 studies/step21_order.py --out order.json [--groups 1 4 8 16] [--shapes 2048x2048x2048 ...]

Tiles of C go on grid x in groups of GROUP_ROWS tile rows, column by column within a group (step 20; 1 is
plain row-major order). For each shape's shipped float32 record, the same config is built with each group
height and verified and timed by autotune.measure (the tuner's protocol) in one process. Prints a table of
GFLOPS and writes JSON.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import kernels
import kernels.base
from autotune import backends
from autotune.measure import measure
from autotune.records import shipped_rows

SHAPES = ["2048x2048x2048", "4096x4096x4096", "8192x8192x8192", "1024x1024x1024", "1792x1792x1792",
          "2000x2000x2000"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--groups", nargs="*", type=int, default=[1, 4, 8, 16])
    parser.add_argument("--shapes", nargs="*", default=SHAPES)
    args = parser.parse_args()
    device = backends.current().device()
    rows = {(r["m"], r["n"], r["k"]): r for r in shipped_rows(device.name, "float32")
            if (r.get("layout") or "NN") == "NN"}
    shipped_group = kernels.base.GROUP_ROWS
    results = []
    for text in args.shapes:
        shape = tuple(map(int, text.split("x")))
        row = rows[shape]
        figures = {}
        for group in args.groups:
            kernels.base.GROUP_ROWS = group
            result = measure(kernels.build(row["family"], row["params"], "float32"), *shape, np.random.default_rng(0))
            figures[group] = result.gflops if result.verification.ok else 0.0
        kernels.base.GROUP_ROWS = shipped_group
        results.append({"shape": text, "family": row["family"], "params": row["params"], "gflops": figures})
        cells = "  ".join(f"G={g}: {v:8.0f}" for g, v in figures.items())
        print(f"{text:>16} {row['family']:>6}  {cells}", flush=True)
    with open(args.out, "w") as handle:
        json.dump({"device": device.name, "shipped_group": shipped_group, "rows": results}, handle, indent=1)


if __name__ == "__main__":
    main()
