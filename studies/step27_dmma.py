"""float64 on the FP64 tensor cores: `dmma` configs next to the shipped float64 record and cuBLAS's DGEMM.

    python3 studies/step27_dmma.py --out dmma.json --shapes 1024x1024x1024 4096x4096x4096 \
        [--mma m16n8k8 ...] [--bm 64 128 --bn 64 128 --bk 16 32 --stages 3 4 --splits 1] [--store DIR] [--seconds S]

Jobs: at each shape, every feasible `dmma` config whose instruction, block tile, stages and
splits are among those given (the other parameters over the family's whole space), and the shipped float64 record
of the shape if there is one. Built and timed as studies/step23_table.py does: every kernel
built into a store by --jobs processes at once, then each launched through the driver plan
`matmul` uses on PyTorch tensors, checked against float64 rows and timed by CUDA events around a
CUDA graph, next to torch.matmul (cuBLAS DGEMM) on the same tensors. Prints per shape cuBLAS, the
record and the best --top configs, as ratios to cuBLAS and to the FP64 FFMA peak.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from step23_table import build_all, job, timed_shapes  # studies/, the script's folder

from autotune.records import shipped_rows
from kernels.base import DeviceLimits, all_configs
from kernels.dmma import SPACE, restrict

#: H200: 132 SMs x 64 FP64 FMA a clock x 2 flops x 1.98 GHz, in GFLOPS
FFMA_PEAK_GFLOPS = 33_450


def dmma_configs(mma: list[str], bm: list[int], bn: list[int], bk: list[int], stages: list[int],
                 splits: list[int]) -> list[dict]:
    limits = DeviceLimits.for_cc("9.0")
    space = {**SPACE, "mma": mma, "bm": bm, "bn": bn, "bk": bk, "stages": stages, "splits": splits, "min_blocks": [1]}
    return [c for c in all_configs(space) if restrict(c, "float64", limits) is None]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", nargs="+", required=True)
    parser.add_argument("--mma", nargs="+", default=SPACE["mma"])
    parser.add_argument("--bk", type=int, nargs="+", default=SPACE["bk"])
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
    configs = dmma_configs(args.mma, args.bm, args.bn, args.bk, args.stages, args.splits)
    records = {(r["m"], r["n"], r["k"]): r for r in shipped_rows(None, "float64") if (r.get("layout") or "NN") == "NN"}
    jobs = []
    for shape in shapes:
        jobs += [job("dmma", config, "float64", shape, "sweep") for config in configs]
        if shape in records:
            jobs.append(job(records[shape]["family"], records[shape]["params"], "float64", shape, "record"))
    root = Path(args.store or tempfile.mkdtemp(prefix="mmtune-dmma-"))
    failed = build_all(jobs, root, args.jobs)

    from autotune.peers import TorchDevice
    from kernels import source_hashes

    device = TorchDevice()
    result = {"device": device.name, "kernels": source_hashes(), "ffma_peak_gflops": FFMA_PEAK_GFLOPS, "shapes": []}
    for (shape, dtype), group, blas, seconds in timed_shapes(device, jobs, root, failed, began + args.seconds):
        result["shapes"].append({"shape": list(shape), "dtype": dtype, "cublas_gflops": blas, "jobs": group})
        Path(args.out).write_text(json.dumps(result, indent=0))
        blas = blas or float("nan")
        print(f"{'x'.join(map(str, shape))}: cuBLAS {blas:8.0f} GFLOPS ({blas / FFMA_PEAK_GFLOPS:.2f} of FFMA peak), "
              f"{seconds:.0f} s", flush=True)
        ran = sorted((j for j in group if j.get("gflops")), key=lambda j: -j["gflops"])
        shown = ran[:args.top] + [j for j in ran[args.top:] if j["source"] == "record"]
        for j in shown:
            print(f"  {j['source']:>6} {j['gflops']:8.0f}  {j['gflops'] / blas:5.3f}x cuBLAS  "
                  f"{j['gflops'] / FFMA_PEAK_GFLOPS:4.2f} of peak  regs {j.get('registers')}  {j['family']} "
                  f"{json.dumps(j['params'], sort_keys=True)}", flush=True)
        errors = [j for j in group if j.get("error")]
        print(f"  {len(ran)} ran, {len(errors)} failed" + (f" (first: {errors[0]['error']})" if errors else ""))
    print(f"done in {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
