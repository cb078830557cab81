"""The tensor-core families: `dmma` (float64) or `tf32x3` (float32) configs next to the shipped record and cuBLAS.

    python3 studies/step27_dmma.py --out dmma.json --shapes 1024x1024x1024 4096x4096x4096 [--family tf32x3] \
        [--mma m16n8k8 ...] [--bm 64 128 --bn 64 128 --bk 16 32 --stages 3 4 --splits 1] [--store DIR] [--seconds S]

Jobs: at each shape, every feasible config of --family (its dtype: dmma float64, tf32x3 float32)
whose instruction, block tile, stages and splits are among those given (the other parameters
over the family's whole space), and the shipped record of the shape in that dtype if there is one. Built and timed as studies/step23_table.py does: every kernel
built into a store by --jobs processes at once, then each launched through the driver plan
`matmul` uses on PyTorch tensors, checked against float64 rows and timed by CUDA events around a
CUDA graph, next to torch.matmul (cuBLAS) on the same tensors. Prints per shape cuBLAS, the
record and the best --top configs, as ratios to cuBLAS and to the dtype's FFMA peak, with each
product's relative error (the float64 rows' Frobenius norm) next to cuBLAS's.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from step23_table import build_all, job, timed_shapes  # studies/, the script's folder

import kernels
from autotune.records import shipped_rows
from kernels.base import DeviceLimits, all_configs

#: H200: 132 SMs x 64 FP64 (128 FP32) FMA a clock x 2 flops x 1.98 GHz, in GFLOPS
FFMA_PEAK_GFLOPS = {"float64": 33_450, "float32": 66_900}
DTYPES = {"dmma": "float64", "tf32x3": "float32"}


def mma_configs(family: str, mma: list[str], bm: list[int], bn: list[int], bk: list[int], stages: list[int],
                splits: list[int]) -> list[dict]:
    limits, entry = DeviceLimits.for_cc("9.0"), kernels.family(family)
    space = {**entry.space, "mma": mma, "bm": bm, "bn": bn, "bk": bk, "stages": stages, "splits": splits,
             "min_blocks": [1]}
    return [c for c in all_configs(space) if entry.restrict(c, DTYPES[family], limits) is None]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", nargs="+", required=True)
    parser.add_argument("--family", choices=list(DTYPES), default="dmma")
    parser.add_argument("--mma", nargs="+")
    parser.add_argument("--bk", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--bm", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--bn", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--stages", type=int, nargs="+", default=[3, 4])
    parser.add_argument("--splits", type=int, nargs="+", default=[1])
    parser.add_argument("--store")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1e9, help="stop timing new shapes after this long")
    args = parser.parse_args()
    began = time.perf_counter()
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes]
    dtype = DTYPES[args.family]
    configs = mma_configs(args.family, args.mma or kernels.family(args.family).space["mma"], args.bm, args.bn,
                          args.bk, args.stages, args.splits)
    records = {(r["m"], r["n"], r["k"]): r for r in shipped_rows(None, dtype) if (r.get("layout") or "NN") == "NN"}
    jobs = []
    for shape in shapes:
        jobs += [job(args.family, config, dtype, shape, "sweep") for config in configs]
        if shape in records:
            jobs.append(job(records[shape]["family"], records[shape]["params"], dtype, shape, "record"))
    root = Path(args.store or tempfile.mkdtemp(prefix="mmtune-dmma-"))
    failed = build_all(jobs, root, args.jobs)

    from autotune.peers import TorchDevice
    from kernels import source_hashes

    device = TorchDevice()
    peak = FFMA_PEAK_GFLOPS[dtype]
    result = {"device": device.name, "kernels": source_hashes(), "ffma_peak_gflops": peak, "shapes": []}
    for (shape, dtype), group, blas, seconds, blas_error in timed_shapes(device, jobs, root, failed,
                                                                         began + args.seconds):
        result["shapes"].append({"shape": list(shape), "dtype": dtype, "cublas_gflops": blas,
                                 "cublas_relative_error": blas_error, "jobs": group})
        Path(args.out).write_text(json.dumps(result, indent=0))
        blas = blas or float("nan")
        print(f"{'x'.join(map(str, shape))}: cuBLAS {blas:8.0f} GFLOPS ({blas / peak:.2f} of FFMA peak), "
              f"relative error {blas_error:.2e}, {seconds:.0f} s", flush=True)
        ran = sorted((j for j in group if j.get("gflops")), key=lambda j: -j["gflops"])
        shown = ran[:args.top] + [j for j in ran[args.top:] if j["source"] == "record"]
        for j in shown:
            print(f"  {j['source']:>6} {j['gflops']:8.0f}  {j['gflops'] / blas:5.3f}x cuBLAS  "
                  f"{j['gflops'] / peak:4.2f} of peak  error {j['relative_error']:.2e}  regs {j.get('registers')}  "
                  f"{j['family']} {json.dumps(j['params'], sort_keys=True)}", flush=True)
        errors = [j for j in group if j.get("error")]
        print(f"  {len(ran)} ran, {len(errors)} failed" + (f" (first: {errors[0]['error']})" if errors else ""))
    print(f"done in {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
