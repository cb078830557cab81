"""Why the tuner's figure for a config and the call path's disagreed in step 20, and whether they agree now.

    python3 studies/step21_timing.py --out timing.json [--shapes 1024x1024x1024 ...]

For the shipped float32 record of each shape, on GPU 0 in one process, the same config timed five ways:
  tuner     autotune.measure.measure (Numba's launcher on Numba arrays, held queue: what trials use)
  numba     Numba's launcher on Numba arrays, CUDA events around a loop of launches
  numba_t   Numba's launcher on torch tensors (cuda.as_cuda_array once), events around a loop
  store     the kernel store's cubin through a driver plan on torch tensors, events around a loop
  call      autotune.matmul(A, B, out=C) on torch tensors, events around a loop (what users call)
each twice, interleaved, and the registers of Numba's build and the store's. Then what zeroing a small C
costs split-K inside a CUDA graph (the memset node before its kernel), per call: the cost model's
SPLIT_LAUNCH_MS. Prints a table; writes JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json

import numpy as np
import torch
from cuda.bindings import driver
from numba import cuda

import kernels
from autotune import launch, matmul, store
from autotune.measure import measure
from autotune.operands import memory_shapes
from autotune.records import shipped_rows

torch.backends.cuda.matmul.allow_tf32 = False


def events_ms(call, calls: int) -> float:
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        call()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / calls


def cubin_bytes(code) -> bytes:
    """The bytes of what Numba's code library returns for a cubin (bytes, or an object holding them)."""
    for attribute in ("code", "image", "_code"):
        code = getattr(code, attribute, code)
    try:
        return bytes(code)
    except TypeError:
        return b""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", nargs="*", default=["1024x1024x1024", "1792x1792x1792", "2000x2000x2000",
                                                        "2048x2048x2048", "1280x1280x1280", "1000x1000x1000",
                                                        "257x5003x1031"])
    args = parser.parse_args()
    name = torch.cuda.get_device_name(0)
    rows = {(r["m"], r["n"], r["k"]): r for r in shipped_rows(name, "float32") if (r.get("layout") or "NN") == "NN"}
    cc = torch.cuda.get_device_capability(0)
    dev = launch.device(0)
    results = []
    for text in args.shapes:
        m, n, k = map(int, text.split("x"))
        row = rows.get((m, n, k))
        if row is None:
            print(f"{text}: no record")
            continue
        family, params = row["family"], row["params"]
        kernel = kernels.build(family, params, "float32")
        dispatcher = kernel.compile()
        numba_regs = dispatcher.get_regs_per_thread()
        numba_cubin = cubin_bytes(next(iter(dispatcher.overloads.values()))._codelibrary.get_cubin(cc=cc))
        entry = store.get(family, params, "float32", cc)
        A = torch.randn(m, k, device="cuda")
        B = torch.randn(k, n, device="cuda")
        C = torch.empty(m, n, device="cuda")
        nA, nB = cuda.to_device(A.cpu().numpy()), cuda.to_device(B.cpu().numpy())
        nC = cuda.device_array((m, n), np.float32)
        tA, tB, tC = (cuda.as_cuda_array(x) for x in (A, B, C))
        loaded = launch.load(entry.cubin, entry.name, entry.dynamic_shared)
        words, slots = launch.pack_arguments(memory_shapes(m, n, k, "NN"), 4)
        plan = launch.Plan(loaded, dev, launch.grid_for(m, n, entry.tile, entry.splits), entry.block, words, slots,
                           m * n if entry.splits > 1 else 0)
        raw = torch.cuda.current_stream().cuda_stream
        pointers = (A.data_ptr(), B.data_ptr(), C.data_ptr())
        calls = max(20, min(2000, int(0.05 / (2 * m * n * k / 30e12))))
        ways = {
            "numba": lambda: kernel.launch(nA, nB, nC),
            "numba_t": lambda: kernel.launch(tA, tB, tC, cuda.external_stream(raw)),
            "store": lambda: plan.launch(*pointers, raw),
            "call": lambda: matmul(A, B, out=C),
        }
        figures: dict[str, list[float]] = {way: [] for way in ["tuner", *ways]}
        for _ in range(2):
            result = measure(kernel, m, n, k, np.random.default_rng(0))
            figures["tuner"].append(result.gflops)
            for way, call in ways.items():
                figures[way].append(2 * m * n * k / (events_ms(call, calls) * 1e-3) / 1e9)
        reference = A.double() @ B.double()
        matmul(A, B, out=C)
        error = float(torch.linalg.norm(C.double() - reference) / torch.linalg.norm(reference))
        record = {
            "shape": text, "family": family, "params": params, "record_gflops": row["gflops"], "gflops": figures,
            "numba_registers": numba_regs, "store_registers": entry.header.get("registers"),
            "same_cubin": hashlib.sha256(numba_cubin).hexdigest() == entry.header["cubin_sha256"]
            if numba_cubin else None,
            "call_error": error,
        }
        results.append(record)
        cells = "  ".join(f"{way} {max(values):7.0f}" for way, values in figures.items())
        print(f"{text:>16} {family:>6} record {row['gflops']:7.0f}  {cells}  regs {numba_regs}/"
              f"{record['store_registers']} same cubin {record['same_cubin']}  err {error:.1e}", flush=True)
    zero_us = memset_us()
    print(f"zeroing a 97x40 C in a CUDA graph: {zero_us:.2f} us per call", flush=True)
    with open(args.out, "w") as handle:
        json.dump({"device": name, "rows": results, "memset_us": zero_us}, handle, indent=1)


def memset_us(calls: int = 200) -> float:
    """Microseconds per memset node in a graph of `calls` memsets of a small C (GPU time)."""
    C = torch.empty(97, 40, device="cuda")
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    words = C.numel()  # what launch.Plan zeroes before a split-K kernel: cuMemsetD32Async
    with torch.cuda.stream(stream):
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                driver.cuMemsetD32Async(C.data_ptr(), 0, words, stream.cuda_stream)
    graph.replay()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        best = min(best, start.elapsed_time(stop) * 1e3 / calls)
    return best


if __name__ == "__main__":
    main()
