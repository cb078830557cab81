"""Step 20 on a GPU: transposed operands, deterministic mode and grid-limit shapes, through torch.

    python3 studies/step20_paths.py --out OUT.json [--shapes wide] [--layouts NT,TN,TT]

For each shape and layout, A and B are made as the layout says (a "T" operand is the `.T` view of
a contiguous tensor) and timed as mmtune's `matmul(A, B, out=C)` and `torch.matmul(A, B, out=C)`
(cuBLAS, TF32 off), each as CUDA events around the replay of a CUDA graph of calls: kernel time,
the launches' host cost left out. Every result is checked against float64. The ratio of a
transposed layout to NN says what serving a layout with the NN-tuned config (the transfer rule)
costs. Then, on the skinny shapes, `matmul(..., deterministic=True)` against the default choice
(twice, bit for bit), and the tall, wide and > 2**32-element products that used to be refused.
Writes a JSON and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch

from autotune import lookup, matmul
from autotune.peers import category, geomean
from autotune.records import suites

torch.backends.cuda.matmul.allow_tf32 = False


def operands(m: int, n: int, k: int, layout: str):
    A = torch.randn(k, m, device="cuda").T if layout[0] == "T" else torch.randn(m, k, device="cuda")
    B = torch.randn(n, k, device="cuda").T if layout[1] == "T" else torch.randn(k, n, device="cuda")
    return A, B


def error(C, A, B) -> float:
    ref = A.double() @ B.double()
    return float(torch.linalg.norm(C.double() - ref) / torch.linalg.norm(ref))


def graph_seconds(call, calls: int, repeats: int = 5) -> float:
    """Median seconds per call: events around the replay of a graph of `calls` calls."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        call()  # builds mmtune's plan before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    graph.replay()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / calls)
    return sorted(samples)[len(samples) // 2]


def calls_for(m: int, n: int, k: int) -> int:
    return max(3, min(200, int(2e-3 / max(2 * m * n * k / 40e12, 5e-6))))


def time_layouts(shapes, layouts) -> list[dict]:
    rows = []
    for m, n, k in shapes:
        for layout in layouts:
            A, B = operands(m, n, k, layout)
            C = torch.empty(m, n, device="cuda")
            matmul(A, B, out=C)
            torch.cuda.synchronize()
            err = error(C, A, B)
            calls = calls_for(m, n, k)
            ours = graph_seconds(lambda: matmul(A, B, out=C), calls)
            theirs = graph_seconds(lambda: torch.matmul(A, B, out=C), calls)
            choice = lookup(m, n, k, "float32", layout=layout)
            row = dict(m=m, n=n, k=k, layout=layout, category=category(m, n, k), error=err, source=choice.source,
                       family=choice.family, mmtune_gflops=2 * m * n * k / ours / 1e9,
                       cublas_gflops=2 * m * n * k / theirs / 1e9, vs_cublas=theirs / ours)
            rows.append(row)
            print(f"{m}x{n}x{k} {layout} {row['source']:>7} {row['family']:>8} mmtune {row['mmtune_gflops']:8.0f} "
                  f"cuBLAS {row['cublas_gflops']:8.0f} ratio {row['vs_cublas']:.3f} err {err:.1e}", flush=True)
    return rows


def time_determinism(shapes) -> list[dict]:
    rows = []
    for m, n, k in shapes:
        A, B = operands(m, n, k, "NN")
        C = torch.empty(m, n, device="cuda")
        calls = calls_for(m, n, k)
        usual = graph_seconds(lambda: matmul(A, B, out=C), calls)
        fixed = graph_seconds(lambda: matmul(A, B, out=C, deterministic=True), calls)
        first = matmul(A, B, deterministic=True)
        second = matmul(A, B, deterministic=True)
        torch.cuda.synchronize()
        row = dict(m=m, n=n, k=k, default_family=lookup(m, n, k).family,
                   deterministic_family=lookup(m, n, k, deterministic=True).family,
                   default_gflops=2 * m * n * k / usual / 1e9, deterministic_gflops=2 * m * n * k / fixed / 1e9,
                   cost=fixed / usual, identical=bool(torch.equal(first, second)), error=error(first, A, B))
        rows.append(row)
        print(f"deterministic {m}x{n}x{k}: {row['default_family']} {row['default_gflops']:.0f} -> "
              f"{row['deterministic_family']} {row['deterministic_gflops']:.0f} GFLOPS (x{row['cost']:.2f} time), "
              f"identical {row['identical']}", flush=True)
    return rows


def sampled_error(C, A, B, rows: int = 64) -> float:
    """Relative error of a sample of C's rows (a full float64 reference would not fit)."""
    pick = torch.linspace(0, A.shape[0] - 1, min(rows, A.shape[0]), device="cuda").long()
    ref = A[pick].double() @ B.double()
    return float(torch.linalg.norm(C[pick].double() - ref) / torch.linalg.norm(ref))


def time_big_grids() -> list[dict]:
    rows = []
    for m, n, k in [(5_000_000, 16, 16), (16, 5_000_000, 16), (65536, 16, 65537), (16, 65537, 65536)]:
        A, B = operands(m, n, k, "NN")
        start = time.perf_counter()
        C = matmul(A, B)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        ours = graph_seconds(lambda: matmul(A, B, out=C), 3, repeats=3)
        theirs = graph_seconds(lambda: torch.matmul(A, B, out=C), 3, repeats=3)
        matmul(A, B, out=C)
        row = dict(m=m, n=n, k=k, first_call_s=seconds, error=sampled_error(C, A, B),
                   mmtune_gflops=2 * m * n * k / ours / 1e9, cublas_gflops=2 * m * n * k / theirs / 1e9)
        rows.append(row)
        print(f"big {m}x{n}x{k}: err {row['error']:.1e} mmtune {row['mmtune_gflops']:.0f} cuBLAS "
              f"{row['cublas_gflops']:.0f} GFLOPS", flush=True)
        torch.cuda.empty_cache()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", default="wide", help="a suite's name or MxNxK,MxNxK...")
    parser.add_argument("--layouts", default="NN,NT,TN,TT")
    parser.add_argument("--parts", default="layouts,determinism,big")
    args = parser.parse_args()
    names = suites()[args.shapes] if args.shapes in suites() else args.shapes.split(",")
    shapes = [tuple(int(x) for x in name.split("x")) for name in names]
    parts = args.parts.split(",")
    out = {"device": torch.cuda.get_device_name(), "shapes": args.shapes}
    if "layouts" in parts:
        out["layouts"] = time_layouts(shapes, args.layouts.split(","))
        out["layout_geomeans"] = {
            layout: geomean([r["vs_cublas"] for r in out["layouts"] if r["layout"] == layout])
            for layout in args.layouts.split(",")
        }
        print("vs cuBLAS by layout:", json.dumps(out["layout_geomeans"]))
    if "determinism" in parts:
        out["determinism"] = time_determinism([s for s in shapes if min(s[0], s[1]) <= 64])
    if "big" in parts:
        out["big"] = time_big_grids()
    with open(args.out, "w") as handle:
        json.dump(out, handle, indent=1)
    assert all(math.isfinite(r["error"]) and r["error"] < 1e-4 for part in ("layouts", "big") for r in out.get(part, []))


if __name__ == "__main__":
    main()
