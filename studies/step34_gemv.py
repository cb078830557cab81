"""Products of a few rows through the `gemv` family (B streamed once), against lookup's pick (the
few-rows rule's 16-row tile) and cuBLAS, with B's rows in memory (NN) and B's columns (NT, as in
x @ W.T).

    python3 studies/step34_gemv.py --out gemv.json --shapes 1x4096x1024 8x4096x4096 [--layouts NN NT]

Jobs at each shape and layout: lookup's pick, and `gemv` with ROWS (the next power of 2 of M, at
most 16) and each of TILES (cols, threads, unroll) with K split 1 to 128 ways. Built, checked and
timed as studies/step23_table.py does (driver plans, CUDA graphs, cuBLAS on the same tensors).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from step23_table import build_all, job, timed_shapes  # studies/, the script's folder
from step33_rows import H200

from autotune.space import DeviceLimits, infeasibility

TILES = [(64, 256, 4), (128, 256, 4), (32, 256, 4), (256, 256, 4), (64, 128, 4), (128, 512, 4), (64, 256, 2)]
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", nargs="+", required=True)
    parser.add_argument("--layouts", nargs="+", default=["NN", "NT"])
    parser.add_argument("--store")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=1e9)
    args = parser.parse_args()
    began = time.perf_counter()
    jobs = [j for s in args.shapes for layout in args.layouts
            for j in candidates(tuple(map(int, s.split("x"))), layout)]
    root = Path(args.store or tempfile.mkdtemp(prefix="mmtune-gemv-"))
    failed = build_all(jobs, root, args.jobs)

    from autotune.peers import TorchDevice

    device = TorchDevice()
    result = {"device": device.name, "shapes": []}
    for (shape, _), group, blas, seconds, _ in timed_shapes(device, jobs, root, failed, began + args.seconds):
        layout = group[0]["layout"]
        result["shapes"].append({"shape": list(shape), "layout": layout, "cublas_gflops": blas, "jobs": group})
        m, n, k = shape
        us = lambda g: 2 * m * n * k / g / 1e3 if g else float("nan")  # noqa: E731
        print(f"{'x'.join(map(str, shape))} {layout}: cuBLAS {us(blas):6.1f} us  ({seconds:.0f} s)", flush=True)
        ranked = sorted(group, key=lambda j: -(j.get("gflops") or 0))
        for j in ranked[:5] + [j for j in ranked[5:] if j.get("lookup")]:
            print(f"  {us(j.get('gflops')):6.1f} us {(j.get('gflops') or 0) / blas:5.3f}x  {j['source'][:18]:>18}  "
                  f"{j['family']} {json.dumps(j['params'], sort_keys=True)} {j.get('error') or ''}", flush=True)
        Path(args.out).write_text(json.dumps(result, indent=0))
    print(f"done in {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
