"""The measured table's candidates that step 31 changed, timed again at the table's training
shapes with unaligned rows.

    python3 studies/step31_table.py --out part.json [--part 0/2] [--store DIR] [--seconds S]

Step 31 changed how a build for unaligned rows fetches through registers (kernels.tiles: groups
of scalar loads from one address); asynchronous copies did not change. At each shape of
autotune/data/measured/<this GPU>.json whose N or K is not a multiple of 4, every candidate whose
tile fetches 16 bytes at a time through registers (wide_fetch without async_copy) is timed again,
candidates that come to the same config being one job; and, as an anchor, the best of the
shape's other candidates, whose code did not change, so that its speed now over its speed in the
table says how far this run's timings sit from the table's. Built and timed as
studies/step23_table.py does (step30_table.time_anchored). --part i/n times every n-th shape from the i-th.

    python3 studies/step31_table.py --ship autotune/data/measured/nvidia-h200.json PART.json[.xz]...

replaces those candidates' speeds in the table, scaled by each shape's anchor
(studies/step30_table.py's `ship`), and prints its leave-one-out accuracy before and after.
"""

from __future__ import annotations

import json
import time

from step30_table import SM_COUNT, TABLE, part_of, ship, table_arguments, time_anchored  # studies/, the script's folder

from autotune.neighbours import config_for
from kernels.base import Config


def unaligned(shape: dict) -> bool:
    return bool(shape["n"] % 4 or shape["k"] % 4)


def changed(family: str, params: dict) -> bool:
    """Whether step 31 changed a candidate's code on unaligned rows."""
    return bool(params.get("wide_fetch") and not params.get("async_copy"))


def shape_jobs(table: dict, shape: dict, changed=changed) -> list[dict]:
    """The jobs timing the candidates at `shape` for which changed(family, params) holds, and as
    the anchor the best of the others; none where all or none of them changed."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    found: dict[str, dict] = {}

    def config(name: str) -> tuple[str, dict]:
        index, policy = name.split(":")
        return config_for(table["tiles"][int(index)], policy, m, n, k, SM_COUNT)

    def job_for(name: str) -> dict:
        family, params = config(name)
        return found.setdefault(Config.of(family, params).key, {
            "family": family, "params": params, "dtype": "float32", "shape": [m, n, k], "candidates": []})

    for name in shape["gflops"]:
        if changed(*config(name)):
            job_for(name)["candidates"].append(name)
    others = [name for name in shape["gflops"] if not changed(*config(name))]
    if found and others:
        job_for(max(others, key=shape["gflops"].get))["anchor"] = max(others, key=shape["gflops"].get)
    return list(found.values()) if others else []


def main() -> None:
    args = table_arguments().parse_args()
    if args.ship:
        return ship(args.ship[0], args.ship[1:], field="unaligned_kernels")
    began = time.perf_counter()
    table = json.loads(TABLE.read_text())
    shapes = part_of([shape for shape in table["shapes"] if unaligned(shape)], args.part)
    jobs = [job for shape in shapes for job in shape_jobs(table, shape)]
    time_anchored(jobs, args.out, args.store, args.jobs, began + args.seconds, "changed")

if __name__ == "__main__":
    main()
