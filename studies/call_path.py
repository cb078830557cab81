"""What a call of `matmul` costs through PyTorch, next to torch.matmul (cuBLAS, TF32 off).

    python studies/call_path.py [--out studies/h200/call_path.json] [--calls 2000]

Measures, on GPU 0 in one process with torch tensors:
  - per-call wall time at 256^3 (back-to-back calls, then one synchronize), with `out=` and
    allocating, for mmtune through driver plans, mmtune through Numba's launcher
    (MMTUNE_LAUNCH=numba) and torch.matmul;
  - at 1024^3 and 4096^3 the call GFLOPS (wall time of back-to-back calls) next to the kernel
    GFLOPS (CUDA events around the same loop) and torch.matmul's;
  - in fresh processes: seconds from "torch ready, inputs on the GPU" to a verified first result,
    importing mmtune included; the first run may compile into the store, the second loads it.
Prints a table and writes JSON. Needs torch with CUDA; the kernel store and cache are the
usual ones (MMTUNE_KERNELS, MMTUNE_CACHE).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

FRESH = r"""
import json, sys, time
import torch
torch.backends.cuda.matmul.allow_tf32 = False
m = n = k = int(sys.argv[1])
A = torch.randn(m, k, device="cuda"); B = torch.randn(k, n, device="cuda")
ref = (A.double() @ B.double())
torch.cuda.synchronize()
profile = None
if len(sys.argv) > 2:  # where to write a profile of the first call
    import cProfile
    profile = cProfile.Profile()
    profile.enable()
start = time.perf_counter()
import autotune
from autotune import matmul
C = matmul(A, B)
torch.cuda.synchronize()
seconds = time.perf_counter() - start
if profile is not None:
    import io, pstats
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(45)
    open(sys.argv[2], "w").write(text.getvalue())
error = float(torch.linalg.norm(C.double() - ref) / torch.linalg.norm(ref))
print(json.dumps({"seconds": seconds, "error": error, "numba_loaded": "numba.cuda" in sys.modules}))
"""


def per_call_us(call, count: int, torch) -> float:
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(count):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / count * 1e6


def gflops(call, size: int, count: int, torch) -> tuple[float, float]:
    """(call GFLOPS by wall time, kernel GFLOPS by CUDA events) over the same back-to-back loop."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start = time.perf_counter()
    begin.record()
    for _ in range(count):
        call()
    end.record()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / count
    kernel = begin.elapsed_time(end) / 1e3 / count
    flops = 2 * size**3
    return flops / wall / 1e9, flops / kernel / 1e9


def fresh_process(size: int, profile: Path | None = None) -> dict:
    extra = [str(profile)] if profile else []
    done = subprocess.run([sys.executable, "-c", FRESH, str(size), *extra], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return {"failure": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--calls", type=int, default=2000, help="calls per per-call timing")
    parser.add_argument("--fresh-size", type=int, default=1024, help="square size for the fresh-process runs")
    parser.add_argument("--profile", type=Path, help="a third fresh run under cProfile, its top entries written here")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("error: this study needs PyTorch with CUDA")
    if not torch.cuda.is_available():
        sys.exit("error: no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    import autotune
    from autotune.call import front

    results: dict = {"device": torch.cuda.get_device_name(0), "per_call_us": {}, "gflops": {}}
    A, B = torch.randn(256, 256, device="cuda"), torch.randn(256, 256, device="cuda")
    C = torch.empty(256, 256, device="cuda")
    for backend in ("driver", "numba"):
        os.environ[front.ENV] = backend
        autotune.clear()
        front.matmul(A, B, out=C)
        if front.backend() != backend:
            results["per_call_us"][f"mmtune {backend}"] = None
            continue
        results["per_call_us"][f"mmtune {backend} out="] = per_call_us(lambda: front.matmul(A, B, out=C), args.calls, torch)
        results["per_call_us"][f"mmtune {backend} allocating"] = per_call_us(lambda: front.matmul(A, B), args.calls, torch)
    os.environ[front.ENV] = "driver"
    autotune.clear()
    results["per_call_us"]["torch.matmul out="] = per_call_us(lambda: torch.matmul(A, B, out=C), args.calls, torch)
    results["per_call_us"]["torch.matmul allocating"] = per_call_us(lambda: torch.matmul(A, B), args.calls, torch)

    for size in (1024, 4096):
        A, B = torch.randn(size, size, device="cuda"), torch.randn(size, size, device="cuda")
        C = torch.empty(size, size, device="cuda")
        count = 200 if size == 1024 else 20
        call, kernel = gflops(lambda: front.matmul(A, B, out=C), size, count, torch)
        reference, _ = gflops(lambda: torch.matmul(A, B, out=C), size, count, torch)
        results["gflops"][str(size)] = {"mmtune_call": call, "mmtune_kernel": kernel,
                                        "call_over_kernel": call / kernel, "torch_call": reference}
    results["fresh_process"] = [fresh_process(args.fresh_size) for _ in range(2)]
    if args.profile:
        results["fresh_process"].append(fresh_process(args.fresh_size, args.profile))

    print(f"on {results['device']}")
    print(f"{'per call at 256^3':32} {'us':>8}")
    for name, value in results["per_call_us"].items():
        print(f"{name:32} {value:8.1f}" if value is not None else f"{name:32} {'-':>8}")
    print(f"{'size':>6} {'call GFLOPS':>12} {'kernel GFLOPS':>14} {'call/kernel':>12} {'torch GFLOPS':>13}")
    for size, row in results["gflops"].items():
        print(f"{size:>6} {row['mmtune_call']:12,.0f} {row['mmtune_kernel']:14,.0f} {row['call_over_kernel']:12.3f} {row['torch_call']:13,.0f}")
    for i, run in enumerate(results["fresh_process"], 1):
        if "failure" in run:
            print(f"fresh process {i}: failed: {run['failure']}")
        else:
            print(f"fresh process {i}: first verified {args.fresh_size}^3 result {run['seconds']:.3f} s after torch was ready "
                  f"(relative error {run['error']:.1e}; numba loaded: {run['numba_loaded']})")
    text = json.dumps(results, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
