"""x @ W.T + b as nn.Linear computes it, three ways through torch tensors in one process: mmtune with
the bias in the kernel's epilogue, mmtune with the bias added by a second kernel (as before step
45), and torch (F.linear: cuBLAS's addmm), each next to the same product without a bias.

    python3 studies/bias.py --out OUT.json [--rows 64 512 2048 4096] [--width 4096]

Times are microseconds of GPU time a call (autotune.measure.measurement.time_launches: the median
of CUDA event pairs around calls queued behind a hold kernel). Errors are ||C - C64||_F / ||C64||_F
against the float64 product of the same operands. Kernels are built before they are timed
(`wait=True`); torch's float32 is IEEE (TF32 off).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from autotune.call import front
from autotune.measure.measurement import time_launches


def timed(call) -> float:
    """Microseconds of GPU time a call: the project's one timer (autotune.measure.measurement)."""
    return time_launches(call).median_ms * 1e3


def row(dtype: torch.dtype, m: int, width: int, precision: str) -> dict:
    x = torch.randn(m, width, device="cuda", dtype=dtype)
    weight = torch.randn(width, width, device="cuda", dtype=dtype)
    bias = torch.randn(width, device="cuda", dtype=dtype)
    exact = torch.addmm(bias.double(), x.double(), weight.double().t())

    def fused():
        return front.matmul(x, weight.t(), precision=precision, bias=bias, wait=True)

    def plain():
        return front.matmul(x, weight.t(), precision=precision, wait=True)

    def two_kernels():
        return plain().add_(bias)

    def error(c):
        return ((c - exact).norm() / exact.norm()).item()

    found = {"dtype": str(dtype).removeprefix("torch."), "m": m, "n": width, "k": width, "layout": "NT",
             "precision": precision, "error_fused": error(fused()), "error_two_kernels": error(two_kernels()),
             "us_fused": timed(fused), "us_two_kernels": timed(two_kernels), "us_no_bias": timed(plain),
             "us_torch_addmm": timed(lambda: torch.nn.functional.linear(x, weight, bias)),
             "us_torch_no_bias": timed(lambda: x @ weight.t())}
    found["fused_over_two"] = found["us_two_kernels"] / found["us_fused"]
    found["fused_vs_torch"] = found["us_torch_addmm"] / found["us_fused"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rows", type=int, nargs="+", default=[64, 512, 2048, 4096])
    parser.add_argument("--width", type=int, default=4096)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for dtype, precisions in ((torch.float32, ("tf32x3", "ieee")), (torch.float64, ("ieee",))):
        for m in args.rows if dtype == torch.float32 else (args.rows[0], args.rows[-2]):
            for precision in precisions:
                rows.append(row(dtype, m, args.width, precision))
                print(json.dumps(rows[-1]), flush=True)
    Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
