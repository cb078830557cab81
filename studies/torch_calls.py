"""What a call costs through autotune.torch, next to torch's own, in one process on one GPU: the
host's time a call (CUDA time included once the GPU is the slower), for torch.matmul and F.linear,
autotune.call.front.matmul, the registered op mmtune::matmul called directly, and
autotune.torch.matmul and .linear (the eager path users call).

    python studies/torch_calls.py --out OUT.json [--calls 2000]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import autotune.torch as mt
from autotune.call import front

SHAPES = ((256, 256, 256), (64, 4096, 4096))


def per_call_us(function, calls: int) -> float:
    for _ in range(20):
        function()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        function()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def calls_of(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> dict:
    """Each way to compute a @ w.T (+ bias), by name."""
    return {
        "torch.matmul NT": lambda: torch.matmul(a, w.t()),
        "F.linear (bias)": lambda: torch.nn.functional.linear(a, w, bias),
        "front.matmul NT": lambda: front.matmul(a, w.t(), wait=True),
        "the op NT": lambda: torch.ops.mmtune.matmul(a, w.t(), None, ""),
        "mt.matmul NT": lambda: mt.matmul(a, w.t()),
        "mt.linear (bias)": lambda: mt.linear(a, w, bias),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for m, n, k in SHAPES:
        a, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
        ways = calls_of(a, w, torch.randn(n, device="cuda"))
        calls = args.calls if m * n * k <= 2**24 else args.calls // 4
        for name, function in ways.items():
            row = {"gpu": torch.cuda.get_device_name(), "shape": [m, n, k], "way": name,
                   "us_per_call": per_call_us(function, calls)}
            rows.append(row)
            print(f"{m}x{n}x{k} {name}: {row['us_per_call']:.2f} us a call", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
