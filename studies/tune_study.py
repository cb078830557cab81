"""Tune shapes on this GPU, then put each winner next to cuBLAS and measure matmul's overhead.

    python studies/tune_study.py --shapes 1024x1024x1024,4096x4096x4096 --trials 40 --out DIR

Writes DIR/cache.db (the tuner's cache), DIR/records.json (its rows: the shipped-records format)
and DIR/tune_study.json (wall times, GFLOPS, cuBLAS in the same process, runtime overhead).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from numba import cuda

from autotune import runtime
from autotune.cache import Cache
from autotune.measure import cublas_matmul, device_info, random_inputs, time_launches, versions
from autotune.tuner import TuneRequest, tune

OVERHEAD_SHAPE = (256, 256, 256)
OVERHEAD_CALLS = 2000


def against_cublas(row: dict) -> dict:
    m, n, k = row["m"], row["n"], row["k"]
    A, B = random_inputs(m, n, k, row["dtype"], np.random.default_rng(1))
    dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array((m, n), A.dtype)
    kernel = runtime.kernel_for(runtime.lookup(m, n, k, row["dtype"]), row["dtype"], (m, n, k))
    cublas = cublas_matmul()
    ours = time_launches(lambda: kernel.launch(dA, dB, dC), repeat=50).gflops(m, n, k)
    theirs = time_launches(lambda: cublas(dA, dB, dC), repeat=50).gflops(m, n, k)
    return {"kernel_gflops": ours, "cublas_gflops": theirs, "ratio": ours / theirs}


def matmul_overhead(dtype: str = "float32") -> dict:
    """Host time per call of matmul(dA, dB, out=dC) vs launching the same kernel directly."""
    m, n, k = OVERHEAD_SHAPE
    A, B = random_inputs(m, n, k, dtype, np.random.default_rng(2))
    dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array((m, n), A.dtype)
    kernel = runtime.kernel_for(runtime.lookup(m, n, k, dtype), dtype, (m, n, k))
    result = {}
    for name, call in (("launch", lambda: kernel.launch(dA, dB, dC)), ("matmul", lambda: runtime.matmul(dA, dB, out=dC))):
        call()
        cuda.synchronize()
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(OVERHEAD_CALLS):
                call()
            cuda.synchronize()
            best = min(best, (time.perf_counter() - start) / OVERHEAD_CALLS * 1e6)
        result[f"{name}_us"] = best
    result["overhead_us"] = result["matmul_us"] - result["launch_us"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1024x1024x1024,4096x4096x4096")
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["MMTUNE_CACHE"] = str(args.out / "cache.db")
    report = {**device_info(), **versions(), "shapes": []}
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        result = tune(TuneRequest(m, n, k, trials=args.trials, seed=0))
        runtime.clear()
        entry = {"shape": shape, "wall_s": result.wall_s, "trials": result.trials, "failed": result.failed, **result.row}
        entry.update(against_cublas(result.row))
        report["shapes"].append(entry)
        print(f"{shape}: {entry['family']} {entry['params']} tuned {entry['gflops']:,.0f} GFLOPS in {entry['wall_s']:.0f} s "
              f"({entry['failed']} failed); re-timed {entry['kernel_gflops']:,.0f} vs cuBLAS {entry['cublas_gflops']:,.0f} "
              f"= {entry['ratio']:.3f}", flush=True)
    report["overhead"] = matmul_overhead()
    print("matmul overhead at {}: {}".format("x".join(map(str, OVERHEAD_SHAPE)), report["overhead"]))
    (args.out / "records.json").write_text(json.dumps(Cache().rows(), indent=1))
    (args.out / "tune_study.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
