"""What peeling C's last rows off buys: a product whose M is a few rows past a multiple of its
tile's BM run as two launches, the rows that fill whole tiles and the few left over.

    python3 studies/step33_peel.py --out peel.json --shapes 257x5003x1031 197x768x3072 ...

A tile on C's bottom edge costs a whole tile row (kernels.vector.edge_origin moves it back inside
C), so at M = 257 with BM = 64 a fifth of the work is the one last row. For each shape, lookup's
pick (the config the call path runs) is timed:
  whole     on the whole product, as `matmul` runs it before step 33;
  peeled    on the first M - r rows (r = M mod BM), then lookup's pick for the r x N x K product
            of the rest on the row views A[M - r:] and C[M - r:];
  main      the first part alone, and `rest` the second part alone;
  relooked  as peeled, with lookup's pick for the (M - r) x N x K product as the first part.
Built, checked and timed as studies/step23_table.py does (driver plans, CUDA graphs, cuBLAS on the
same tensors); every timed call's product is checked against float64 rows.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from step23_table import build_all, build_key, job, operands, timed  # studies/, the script's folder
from step33_rows import arguments

from autotune import store
from autotune.backends import Device
from autotune.peers import TorchDevice

ARCH = (9, 0)
H200 = Device("NVIDIA H200", "9.0", 132)


def part(choice, shape: tuple, first_row: int) -> dict:
    return {**job(choice.family, choice.config, "float32", shape, choice.source), "first_row": first_row}


def shape_variants(shape: tuple) -> dict[str, list[dict]]:
    """name -> the parts (jobs with the row they start at) one call launches, in order."""
    from autotune.runtime import lookup

    m, n, k = shape
    whole = lookup(m, n, k, "float32", H200)
    variants = {"whole": [part(whole, shape, 0)]}
    rest_rows = m % whole.config["bm"]
    if rest_rows and m > whole.config["bm"]:
        main_shape, rest_shape = (m - rest_rows, n, k), (rest_rows, n, k)
        rest = part(lookup(*rest_shape, "float32", H200), rest_shape, m - rest_rows)
        main = part(whole, main_shape, 0)
        variants.update(peeled=[main, rest], main=[main], rest=[rest])
        relooked = lookup(*main_shape, "float32", H200)
        if (relooked.family, relooked.config) != (whole.family, whole.config):
            variants["relooked"] = [part(relooked, main_shape, 0), rest]
    return variants


def timed_variant(device, gpu, root: Path, parts: list[dict], ops, shape: tuple) -> dict:
    import torch

    from autotune import calls

    m, n, k = shape
    plans = []
    for j in parts:
        family, params, dtype, bits, unaligned, layout = build_key(j)
        entry = store.read(store.key_parts(family, json.loads(params), dtype, ARCH, root, layout, bits, unaligned), root)
        pm = j["shape"][0]
        size = np.dtype(dtype).itemsize
        plans.append((calls.entry_plan(gpu, entry, pm, n, k, dtype, layout), j["first_row"] * k * size,
                      j["first_row"] * n * size))

    def call():
        stream = torch.cuda.current_stream().cuda_stream
        for plan, a_offset, c_offset in plans:
            plan.launch(ops.A.data_ptr() + a_offset, ops.B.data_ptr(), ops.C.data_ptr() + c_offset, stream)

    whole_product = sum(j["shape"][0] for j in parts) == m
    seconds, error, relative = (timed(device, call, ops) if whole_product else _timed_unchecked(device, call))
    return {"parts": [{"family": j["family"], "params": j["params"], "rows": j["shape"][0], "source": j["source"]}
                      for j in parts],
            "seconds": seconds, "error": error, "relative_error": relative,
            "gflops": 2 * m * n * k / seconds / 1e9 if seconds and whole_product else None}


def _timed_unchecked(device, call):
    """A part alone does not compute the product: timed as `timed` does, without the check."""
    import statistics

    from step23_table import SAMPLES, graph_calls

    torch = device.torch
    call()
    device.sync()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls = graph_calls(torch, call)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    samples = []
    for _ in range(SAMPLES):
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1e-3 / calls)
    return statistics.median(samples), None, None


def main() -> None:
    args = arguments()
    began = time.perf_counter()
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes]
    variants = {shape: shape_variants(shape) for shape in shapes}
    root = Path(args.store or tempfile.mkdtemp(prefix="mmtune-peel-"))
    failed = build_all([j for v in variants.values() for parts in v.values() for j in parts], root, args.jobs)

    import torch

    from autotune import launch

    device = TorchDevice()
    gpu = launch.device(torch.cuda.current_device())
    result = {"device": device.name, "shapes": {}}
    for index, (shape, found) in enumerate(variants.items()):
        if time.perf_counter() - began > args.seconds:
            print(f"time is up: {len(variants) - index} shapes not timed", flush=True)
            break
        m, n, k = shape
        ops = operands(torch, m, n, k, "float32", seed=index)
        blas, _, _ = timed(device, lambda: torch.matmul(ops.A, ops.B, out=ops.C), ops)
        row = result["shapes"]["x".join(map(str, shape))] = {"cublas_seconds": blas, "variants": {}}
        line = [f"{'x'.join(map(str, shape)):>16} cuBLAS {blas * 1e6:7.1f} us"]
        for name, parts in found.items():
            if any(failed.get(build_key(j)) for j in parts):
                row["variants"][name] = {"error": "; ".join(failed[build_key(j)] for j in parts if failed.get(build_key(j)))}
                line.append(f"{name} failed")
                continue
            timing = row["variants"][name] = timed_variant(device, gpu, root, parts, ops, shape)
            us = timing["seconds"] * 1e6 if timing["seconds"] else float("nan")
            ratio = f" ({blas / timing['seconds']:.3f}x)" if timing["gflops"] else ""
            line.append(f"{name} {us:7.1f} us{ratio}{' ' + timing['error'] if timing['error'] else ''}")
        print("  ".join(line), flush=True)
        for name, parts in found.items():
            print(f"    {name}: " + " + ".join(f"{j['shape'][0]} rows {j['family']} {json.dumps(j['params'], sort_keys=True)}"
                                              for j in parts), flush=True)
        Path(args.out).write_text(json.dumps(result, indent=0))
    print(f"done in {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
