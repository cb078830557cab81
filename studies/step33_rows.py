"""Products of a few rows (M <= 8, e.g. the rows left after peeling, or a batch of one): how
close the 16-row tiles of the space come to cuBLAS, against lookup's pick.

    python3 studies/step33_rows.py --out rows.json --shapes 1x5003x1031 1x4096x1024 8x4096x4096

Jobs at each shape: lookup's pick, and 16-row tiles (BN 64 or 128, BK 16 or 32, TN 4 or 8,
through registers or 3 `cp.async` stages) with K split 8, 16, 32 or 64 ways and streamed on 2
blocks per SM. Built, checked and timed as studies/step23_table.py does (driver plans, CUDA
graphs, cuBLAS on the same tensors).
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path

from step23_table import build_all, job, timed_shapes  # studies/, the script's folder

from autotune.backends import Device
from autotune.space import DeviceLimits, infeasibility

H200 = Device("NVIDIA H200", "9.0", 132)
BASE = {"bm": 16, "tm": 4, "pad": 4, "unroll": True, "fragments": 1, "wide_fetch": True, "min_blocks": 1}
PIPELINES = ({"async_copy": False, "stages": 1}, {"async_copy": True, "stages": 3})


def candidates(shape: tuple) -> list[dict]:
    from autotune.runtime import lookup

    limits, jobs = DeviceLimits.for_cc("9.0"), []
    choice = lookup(*shape, "float32", H200)
    jobs.append({**job(choice.family, choice.config, "float32", shape, f"lookup ({choice.source})"), "lookup": True})
    for bn, bk, tn, pipeline in itertools.product((64, 128), (16, 32), (4, 8), PIPELINES):
        tile = {**BASE, "bn": bn, "bk": bk, "tn": tn, **pipeline}
        variants = [("splitk", {**tile, "splits": s}) for s in (8, 16, 32, 64)]
        variants.append(("streamk", {**tile, "workers_per_sm": 2}))
        for family, params in variants:
            if infeasibility(family, params, "float32", limits) is None:
                jobs.append(job(family, params, "float32", shape, "rows"))
    return jobs


def arguments() -> argparse.Namespace:
    """The options of a sweep over shapes: --out, --shapes, --store, --jobs, --seconds."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", nargs="+", required=True)
    parser.add_argument("--store")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=1e9)
    return parser.parse_args()


def main(candidates=candidates) -> None:
    """Builds and times `candidates(shape)` at each --shapes shape; prints each shape's (and
    layout's, where jobs name one other than NN) best six and lookup's pick; writes the JSON
    after every shape."""
    args = arguments()
    began = time.perf_counter()
    jobs = [j for s in args.shapes for j in candidates(tuple(map(int, s.split("x"))))]
    root = Path(args.store or tempfile.mkdtemp(prefix="mmtune-rows-"))
    failed = build_all(jobs, root, args.jobs)

    from autotune.peers import TorchDevice

    device = TorchDevice()
    result = {"device": device.name, "shapes": {}}
    for (shape, _), group, blas, seconds, _ in timed_shapes(device, jobs, root, failed, began + args.seconds):
        layout = group[0].get("layout", "NN")
        name = "x".join(map(str, shape)) + ("" if layout == "NN" else f" {layout}")
        result["shapes"][name] = {"cublas_gflops": blas, "jobs": group}
        m, n, k = shape
        us = lambda g: 2 * m * n * k / g / 1e3 if g else float("nan")  # noqa: E731
        print(f"{name}: cuBLAS {us(blas):6.1f} us  ({seconds:.0f} s)", flush=True)
        ranked = sorted(group, key=lambda j: -(j.get("gflops") or 0))
        for j in ranked[:6] + [j for j in ranked[6:] if j.get("lookup")]:
            print(f"  {us(j.get('gflops')):6.1f} us {(j.get('gflops') or 0) / blas:5.3f}x  {j['source'][:18]:>18}  "
                  f"{j['family']} {json.dumps(j['params'], sort_keys=True)} {j.get('error') or ''}", flush=True)
        Path(args.out).write_text(json.dumps(result, indent=0))
    print(f"done in {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
