"""Stream-K (kernels.streamk) next to the shipped record, lookup's pick and cuBLAS.

    python3 studies/step30_streamk.py --out streamk.json --shapes 1000x1000x1000 777x1555x333 \
        [--tiles 4] [--workers 1 2 3 4] [--store DIR] [--seconds S]

Jobs at each shape: the shipped float32 record of the shape if there is one, the config `lookup`
picks there, and stream-K configs with each of --workers blocks per SM made of the record's tile,
lookup's tile and the --tiles best tiles of the measured table for the shape
(autotune.neighbours.ranked), each without its K-splits. Built, checked against float64 rows and
timed as studies/step23_table.py does: driver plans on PyTorch tensors, CUDA graphs, torch.matmul
(cuBLAS) on the same tensors. Prints per shape cuBLAS, the record, lookup's pick and the best
--top jobs as ratios to cuBLAS.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from step23_table import build_all, job, timed_shapes  # studies/, the script's folder

from autotune import neighbours
from autotune.records import measured_tables, shipped_rows
from autotune.space import DeviceLimits, infeasibility

TILE_FAMILIES = ("vector", "splitk", "streamk")


def tile_of(params: dict) -> dict:
    return {k: v for k, v in params.items() if k not in ("splits", "workers_per_sm")}


def shape_jobs(shape: tuple, record: dict | None, sm_count: int, tiles: int, workers: list[int]) -> list[dict]:
    from autotune.runtime import lookup

    choice = lookup(*shape, "float32")
    jobs = [job(choice.family, choice.config, "float32", shape, f"lookup ({choice.source})")]
    bases = [choice.config] if choice.family in TILE_FAMILIES else []
    if record is not None:
        jobs.append(job(record["family"], record["params"], "float32", shape, "record"))
        bases += [record["params"]] if record["family"] in TILE_FAMILIES else []
    table = next((t for t in measured_tables() if t["dtype"] == "float32" and t["cc"] == "9.0"), None)
    if table is not None:
        bases += [pick.config for pick in neighbours.ranked(table, *shape, sm_count, count=tiles)]
    limits = DeviceLimits.for_cc("9.0")
    seen = set()
    for base in bases:
        for count in workers:
            params = {**tile_of(base), "workers_per_sm": count}
            key = json.dumps(params, sort_keys=True)
            if key not in seen and infeasibility("streamk", params, "float32", limits) is None:
                seen.add(key)
                jobs.append(job("streamk", params, "float32", shape, "stream"))
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", nargs="+", required=True)
    parser.add_argument("--tiles", type=int, default=4)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--store")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1e9, help="stop timing new shapes after this long")
    args = parser.parse_args()
    began = time.perf_counter()

    from autotune.peers import TorchDevice
    from kernels import source_hashes

    device = TorchDevice()
    sm_count = device.torch.cuda.get_device_properties(0).multi_processor_count
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes]
    records = {(r["m"], r["n"], r["k"]): r for r in shipped_rows(None, "float32") if (r.get("layout") or "NN") == "NN"}
    jobs = [j for shape in shapes for j in shape_jobs(shape, records.get(shape), sm_count, args.tiles, args.workers)]
    root = Path(args.store or tempfile.mkdtemp(prefix="mmtune-streamk-"))
    failed = build_all(jobs, root, args.jobs)

    result = {"device": device.name, "kernels": source_hashes(), "shapes": []}
    for (shape, dtype), group, blas, seconds, blas_error in timed_shapes(device, jobs, root, failed,
                                                                         began + args.seconds):
        result["shapes"].append({"shape": list(shape), "dtype": dtype, "cublas_gflops": blas,
                                 "cublas_relative_error": blas_error, "jobs": group})
        Path(args.out).write_text(json.dumps(result, indent=0))
        blas = blas or float("nan")
        print(f"{'x'.join(map(str, shape))}: cuBLAS {blas:8.0f} GFLOPS, relative error {blas_error:.2e}, "
              f"{seconds:.0f} s", flush=True)
        ran = sorted((j for j in group if j.get("gflops")), key=lambda j: -j["gflops"])
        shown = ran[:args.top] + [j for j in ran[args.top:] if j["source"] != "stream"]
        for j in shown:
            print(f"  {j['source']:>16} {j['gflops']:8.0f}  {j['gflops'] / blas:5.3f}x cuBLAS  "
                  f"error {j['relative_error']:.2e}  regs {j.get('registers')}  "
                  f"{j['family']} {json.dumps(j['params'], sort_keys=True)}", flush=True)
        errors = [j for j in group if j.get("error")]
        print(f"  {len(ran)} ran, {len(errors)} failed" + (f" (first: {errors[0]['error']})" if errors else ""))
    print(f"done in {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
