"""The measured table's candidates that step 32 changed, timed again at the table's training
shapes whose C rows are unaligned.

    python3 studies/step32_table.py --out part.json [--part 0/2] [--store DIR] [--seconds S]

Step 32 changed how split-K and stream-K kernels add into C whose rows are not 16-byte aligned
(N not a multiple of 4): each group of 4 columns goes in as the widest `red`s its address allows
instead of one 4-byte `red` a column. At each shape of autotune/data/measured/<this GPU>.json
whose N is not a multiple of 4, every candidate that adds into C there (K split, or streamed)
and ran at --within of the shape's best or faster is timed again, with the best of the shape's
other candidates as the anchor; built, timed and shipped as studies/step31_table.py does. (The
slower ones keep their speeds of the 4-byte adds: they would have to gain more than the change
gave any config measured at the wide suite's odd shapes to become a shape's pick.)

    python3 studies/step32_table.py --ship autotune/data/measured/nvidia-h200.json PART.json[.xz]...
"""

from __future__ import annotations

import json
import time

from step30_table import TABLE, part_of, ship, table_arguments, time_anchored  # studies/, the script's folder
from step31_table import shape_jobs

from autotune.store import adds_into_c


def changed(family: str, params: dict) -> bool:
    """Whether step 32 changed a candidate's code where C's rows are unaligned."""
    return adds_into_c(params)


def main() -> None:
    parser = table_arguments()
    parser.add_argument("--within", type=float, default=0.6, help="time candidates this close to a shape's best")
    args = parser.parse_args()
    if args.ship:
        return ship(args.ship[0], args.ship[1:], field="unaligned_c_kernels")
    began = time.perf_counter()
    table = json.loads(TABLE.read_text())
    shapes = part_of([shape for shape in table["shapes"] if shape["n"] % 4], args.part)
    jobs = [job for shape in shapes for job in shape_jobs(table, shape, changed)
            if job.get("anchor") or max(shape["gflops"][name] for name in job["candidates"])
            >= args.within * max(shape["gflops"].values())]
    time_anchored(jobs, args.out, args.store, args.jobs, began + args.seconds, "adding")


if __name__ == "__main__":
    main()
