"""What unaligned rows cost: each odd shape next to its aligned twin, and the copies that would
pad the operands to it.

    python3 studies/step31_pitch.py --out pitch.json --shapes 1023x1025x999 257x5003x1031 [--tiles 6]

For a shape M x N x K whose N or K is not a multiple of 4 (rows of B or A not 16-byte aligned),
its twin is M x N4 x K4 with N4, K4 rounded up to multiples of 4. Jobs at both: the shipped record of
the shape and lookup's pick with their stream-K variants (studies/step30_streamk.py), and the
--tiles best configs of the measured table for the twin, whole. Timed as
studies/step23_table.py does (driver plans, CUDA graphs, cuBLAS on the same tensors).

Then the copies padding would add per call, timed over CUDA graphs of PyTorch copies: A into an
M x K4 buffer, B into K4 x N4, and C back from M x N4. The projection is the shape's FLOPs over
the twin's best kernel time plus those copies, as a ratio to cuBLAS at the shape.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from step23_table import build_all, job, timed_shapes  # studies/, the script's folder
from step30_streamk import shape_jobs

from autotune import neighbours
from autotune.records import measured_tables, shipped_rows


def twin(shape: tuple) -> tuple:
    m, n, k = shape
    return m, -(-n // 4) * 4, -(-k // 4) * 4


def copy_seconds(torch, shape: tuple, calls: int = 50) -> dict:
    """Seconds per call of each padding copy, over a CUDA graph of `calls` copies."""
    m, n, k = shape
    _, n4, k4 = twin(shape)
    A, B, C4 = (torch.randn(s, device="cuda") for s in ((m, k), (k, n), (m, n4)))
    A4, B4, C = torch.zeros((m, k4), device="cuda"), torch.zeros((k4, n4), device="cuda"), torch.empty((m, n), device="cuda")
    copies = {"A": lambda: A4[:, :k].copy_(A), "B": lambda: B4[:k, :n].copy_(B), "C": lambda: C.copy_(C4[:, :n])}
    seconds = {}
    for name, copy in copies.items():
        copy()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                copy()
        graph.replay()
        torch.cuda.synchronize()
        samples = []
        for _ in range(5):
            start, stop = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            samples.append(start.elapsed_time(stop) * 1e-3 / calls)
        seconds[name] = sorted(samples)[2]
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", nargs="+", required=True)
    parser.add_argument("--tiles", type=int, default=6)
    parser.add_argument("--store")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=1e9)
    args = parser.parse_args()
    began = time.perf_counter()

    from autotune.peers import TorchDevice

    device = TorchDevice()
    torch = device.torch
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes]
    records = {(r["m"], r["n"], r["k"]): r for r in shipped_rows(None, "float32") if (r.get("layout") or "NN") == "NN"}
    table = next(t for t in measured_tables() if t["dtype"] == "float32" and t["cc"] == "9.0")
    jobs = []
    for shape in shapes:
        aligned = twin(shape)
        for at in (shape, aligned):
            jobs += shape_jobs(at, records.get(shape), sm_count, args.tiles if at == aligned else 1, [2])
            jobs += [job(p.family, p.config, "float32", at, "table") for p in
                     neighbours.ranked(table, *aligned, sm_count, count=args.tiles)]
    root = Path(args.store or tempfile.mkdtemp(prefix="mmtune-pitch-"))
    failed = build_all(jobs, root, args.jobs)

    result = {"device": device.name, "shapes": {}}
    for (shape, _), group, blas, seconds, _ in timed_shapes(device, jobs, root, failed, began + args.seconds):
        ran = sorted((j for j in group if j.get("gflops")), key=lambda j: -j["gflops"])
        result["shapes"]["x".join(map(str, shape))] = {"cublas_gflops": blas, "jobs": group}
        print(f"{'x'.join(map(str, shape))}: cuBLAS {blas:8.0f}", flush=True)
        for j in ran[:4] + [j for j in ran[4:] if j["source"] == "record"]:
            print(f"  {j['source']:>16} {j['gflops']:8.0f} {j['gflops'] / blas:5.3f}x  {j['family']} "
                  f"{json.dumps(j['params'], sort_keys=True)}", flush=True)
    for shape in shapes:
        key, aligned = "x".join(map(str, shape)), "x".join(map(str, twin(shape)))
        if key not in result["shapes"] or aligned not in result["shapes"]:
            continue
        copies = copy_seconds(torch, shape)
        flops = 2 * shape[0] * shape[1] * shape[2]
        own, padded = result["shapes"][key], result["shapes"][aligned]
        best_own = max((j["gflops"] for j in own["jobs"] if j.get("gflops")), default=None)
        best_twin = max((j for j in padded["jobs"] if j.get("gflops")), key=lambda j: j["gflops"])
        twin_seconds = 2 * twin(shape)[0] * twin(shape)[1] * twin(shape)[2] / best_twin["gflops"] / 1e9
        needed = copies["B"] + copies["C"] + (copies["A"] if shape[2] % 4 else 0)
        projected = flops / (twin_seconds + needed) / 1e9
        result["shapes"][key]["copies_s"] = copies
        result["shapes"][key]["projected_gflops"] = projected
        print(f"{key}: best here {best_own / own['cublas_gflops']:.3f}x, twin best "
              f"{best_twin['gflops'] / own['cublas_gflops']:.3f}x ({twin_seconds * 1e6:.1f} us), copies A/B/C "
              f"{copies['A'] * 1e6:.1f}/{copies['B'] * 1e6:.1f}/{copies['C'] * 1e6:.1f} us, padded "
              f"{projected / own['cublas_gflops']:.3f}x cuBLAS", flush=True)
    Path(args.out).write_text(json.dumps(result, indent=0))
    print(f"done in {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
