"""Does asking ptxas for two resident blocks per SM (launch_bounds min-blocks = 2, which caps a
256-thread block at 128 registers) beat the default (max threads only)? Each config is verified,
then timed both ways on the same arrays next to cuBLAS, in this process.

    python studies/min_blocks.py --out DIR [--shapes 1024x1024x1024,2048x2048x2048,4096x4096x4096]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
from numba import cuda

import kernels
from autotune.measure import cublas_matmul, device_info, random_inputs, time_launches, verify, versions
from kernels.resources import compile_report

CONFIGS = [
    ("vector", {"bm": 128, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "pad": 4, "stages": 1}),
    ("vector", {"bm": 128, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "pad": 4, "stages": 2}),
    ("vector", {"bm": 128, "bn": 64, "bk": 8, "tm": 8, "tn": 4, "pad": 4, "stages": 1}),
    ("vector", {"bm": 64, "bn": 128, "bk": 8, "tm": 4, "tn": 8, "pad": 4, "stages": 2}),
    ("splitk", {"bm": 128, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "pad": 4, "stages": 2, "splits": 4}),
]


def with_min_blocks(kernel, blocks: int):
    """The same kernel compiled with launch_bounds (threads, blocks)."""

    class Bounded(type(kernel)):
        @property
        def launch_bounds(self):
            return (self.threads, blocks)

    fields = {f.name: getattr(kernel, f.name) for f in dataclasses.fields(kernel) if f.name != "_dispatcher"}
    return Bounded(**fields)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1024x1024x1024,2048x2048x2048,4096x4096x4096")
    parser.add_argument("--out", type=Path, default=Path("min-blocks-out"))
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    cublas = cublas_matmul()
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        A, B = random_inputs(m, n, k, "float32", rng)
        dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array((m, n), A.dtype)
        cublas_gflops = time_launches(lambda: cublas(dA, dB, dC)).gflops(m, n, k)
        for family, config in CONFIGS:
            for blocks in (1, 2):
                kernel = kernels.build(family, config, "float32")
                if blocks > 1:
                    kernel = with_min_blocks(kernel, blocks)
                report = compile_report(kernel)
                row = dict(shape=shape, family=family, config=config, min_blocks=blocks,
                           registers=report.registers, spill_bytes=report.spill_stores, cublas_gflops=cublas_gflops)
                if verify(kernel, m, n, k, rng).ok:
                    row["gflops"] = time_launches(lambda: kernel.launch(dA, dB, dC)).gflops(m, n, k)
                    row["ratio"] = row["gflops"] / cublas_gflops
                rows.append(row)
                print(shape, family, json.dumps(config), f"min_blocks={blocks} regs={row['registers']} spill={row['spill_bytes']}",
                      f"{row.get('gflops', 0):.0f} GFLOPS ratio {row.get('ratio', 0):.3f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "min_blocks.json").write_text(json.dumps({**device_info(), **versions(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
