"""Configs timed on many shapes through the path users call: the measurements behind lookup's
choice for shapes nobody tuned, and an A/B of kernel code.

    python3 studies/step23_table.py --out table.json --records [--dtype float32]
    python3 studies/step23_table.py --out table.json --seeds 2222 3333 --count 20 [--shapes 5913x448x24 ...]

Jobs. With --records: each shipped row's config at its own shape. Otherwise, for each training
shape (autotune.peers.seeded_shapes with the seeds given, none of the bench's suites, plus
--shapes), every tile of the shipped float32 NN rows and of the shape rule
(autotune.space.shape_guesses), each whole and, where wave arithmetic splits K
(autotune.space.wave_splits), split; and lookup's own pick.

1. Every distinct kernel is built into a kernel store (--store, default a temporary directory)
   by --jobs processes at once: compiling needs no GPU, so it runs on every core.
2. Each job is launched through the driver plan `matmul` uses (autotune.calls.entry_plan) on
   PyTorch tensors, checked against float64 rows of the product, and timed by CUDA events around
   a CUDA graph of launches (autotune.peers.TorchDevice), next to torch.matmul (cuBLAS, TF32 off)
   on the same tensors.

The kernels are those `import kernels` finds: put an older copy first on PYTHONPATH (and give it
its own --store) to time older code. Writes the JSON after every shape.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from autotune import store
from autotune.operands import offset_bits, unaligned_rows
from autotune.peers import GRAPH_SAMPLE_SECONDS, MAX_GRAPH_CALLS, Operands, TorchDevice, category, checked_rows, seeded_shapes
from autotune.records import shipped_rows, suites
from autotune.measure import error_bound, reference

ARCH = (9, 0)
SAMPLES = 5


def tile_of(params: dict) -> dict:
    return {k: v for k, v in params.items() if k != "splits"}


def job(family: str, params: dict, dtype: str, shape: tuple, source: str) -> dict:
    return {"family": family, "params": params, "dtype": dtype, "shape": list(shape), "source": source,
            "tile": json.dumps(tile_of(params), sort_keys=True) if family in ("vector", "splitk") else None,
            "policy": "split" if params.get("splits", 1) > 1 else "whole"}


def record_jobs(dtype: str | None) -> list[dict]:
    return [job(r["family"], r["params"], r["dtype"], (r["m"], r["n"], r["k"]), "record")
            for r in shipped_rows(None, dtype) if (r.get("layout") or "NN") == "NN"]


def training_jobs(shapes: list[tuple], sm_count: int) -> list[dict]:
    from autotune.runtime import lookup
    from autotune.backends import Device
    from autotune.space import DeviceLimits, shape_guesses, wave_splits

    limits = DeviceLimits.for_cc("9.0")
    tiles = {}
    for row in shipped_rows(None, "float32"):
        if (row.get("layout") or "NN") == "NN" and row["family"] in ("vector", "splitk"):
            tiles.setdefault(json.dumps(tile_of(row["params"]), sort_keys=True), f"{row['m']}x{row['n']}x{row['k']}")
    device = Device("NVIDIA H200", "9.0", sm_count)
    jobs = []
    for shape in shapes:
        own = dict(tiles)
        for guess in shape_guesses(*shape, "float32", limits, sm_count):
            own.setdefault(json.dumps(tile_of(guess.params), sort_keys=True), "rule")
        found = {}
        for text, source in own.items():
            tile = json.loads(text)
            found[("vector", text)] = job("vector", tile, "float32", shape, source)
            splits = wave_splits(*shape, tile, sm_count)
            if splits > 1:
                params = {**tile, "splits": splits}
                found[("splitk", json.dumps(params, sort_keys=True))] = job("splitk", params, "float32", shape, source)
        choice = lookup(*shape, "float32", device)
        key = (choice.family, json.dumps(choice.config, sort_keys=True))
        found.setdefault(key, job(choice.family, choice.config, "float32", shape, "lookup"))
        found[key]["lookup"] = choice.source
        jobs += found.values()
    return jobs


def build_key(j: dict) -> tuple:
    """What a job's kernel is built as: for its shape and layout (a job's "layout", default NN),
    or for the operands a job's `unaligned` names."""
    m, n, k = j["shape"]
    layout = j.get("layout", "NN")
    return (j["family"], json.dumps(j["params"], sort_keys=True), j["dtype"], offset_bits(m, n, k),
            j.get("unaligned", unaligned_rows(m, n, k, layout, j["dtype"])), layout)


def _build(key: tuple, root: str) -> tuple[tuple, str | None, float]:
    family, params, dtype, bits, unaligned, layout = key
    started = time.perf_counter()
    try:
        store.get(family, json.loads(params), dtype, ARCH, Path(root), layout, bits, unaligned)
        return key, None, time.perf_counter() - started
    except Exception as error:  # noqa: BLE001 - a config that does not build is reported, not fatal
        return key, str(error).splitlines()[0][:300], time.perf_counter() - started


def build_all(jobs: list[dict], root: Path, workers: int) -> dict[tuple, str | None]:
    keys = sorted({build_key(j) for j in jobs})
    started = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        results = list(pool.map(_build, keys, [str(root)] * len(keys)))
    seconds = [s for _, _, s in results]
    print(f"built {len(keys)} kernels in {time.perf_counter() - started:.0f} s on {workers} processes "
          f"(median {statistics.median(seconds):.1f} s each)", flush=True)
    return {key: error for key, error, _ in results}


def operands(torch, m: int, n: int, k: int, dtype: str, seed: int, layout: str = "NN") -> Operands:
    """Random A and B, each a transposed view of a C-contiguous array where `layout` says "T"."""
    kind = getattr(torch, dtype)
    generator = torch.Generator(device="cuda").manual_seed(seed)
    A = torch.randn((k, m) if layout[0] == "T" else (m, k), generator=generator, device="cuda", dtype=kind)
    B = torch.randn((n, k) if layout[1] == "T" else (k, n), generator=generator, device="cuda", dtype=kind)
    A, B = (A.T if layout[0] == "T" else A), (B.T if layout[1] == "T" else B)
    rows = checked_rows(m, n, k, np.random.default_rng(seed))
    A_rows = A[torch.as_tensor(rows, device=A.device)] if isinstance(rows, np.ndarray) else A
    expected = reference(A_rows.cpu().numpy(), B.cpu().numpy())
    return Operands(A, B, torch.empty((m, n), device="cuda", dtype=kind), rows, expected, error_bound(dtype, k))


def graph_calls(torch, call) -> int:
    """How many calls one CUDA graph sample holds: about GRAPH_SAMPLE_SECONDS of them, by one call
    timed on CUDA events."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    stop.record()
    stop.synchronize()
    once = max(start.elapsed_time(stop) * 1e-3, 1e-6)
    return max(1, min(MAX_GRAPH_CALLS, round(GRAPH_SAMPLE_SECONDS / once)))


def timed(device: TorchDevice, call, ops: Operands) -> tuple[float | None, str | None, float]:
    """Median seconds per call over CUDA-graph samples, or None and why; and the product's
    relative error."""
    torch = device.torch
    device.poison(ops.C)
    call()
    device.sync()
    error = ops.error(device.to_host(ops.C))
    if not error <= ops.bound:
        return None, f"wrong product: relative error {error:.2e} > {ops.bound:.2e}", error
    timer = device.kernel_timer(call, ops, graph_calls(torch, call))
    return statistics.median(timer.sample() for _ in range(SAMPLES)), None, error


def time_job(device: TorchDevice, gpu, root: Path, failed: dict, j: dict, ops: Operands) -> None:
    """Time job `j` on `ops` through the driver plan of its stored kernel: sets its error, or its
    registers, relative error and GFLOPS."""
    import torch

    from autotune import calls

    j["error"] = failed.get(build_key(j))
    if j["error"]:
        return
    family, params, dtype, bits, unaligned, layout = build_key(j)
    entry = store.read(store.key_parts(family, json.loads(params), dtype, ARCH, root, layout, bits, unaligned), root)
    m, n, k = j["shape"]
    plan = calls.entry_plan(gpu, entry, m, n, k, dtype, layout)
    j["registers"] = entry.header.get("registers")
    seconds, j["error"], j["relative_error"] = timed(
        device, lambda: plan.launch(ops.A.data_ptr(), ops.B.data_ptr(), ops.C.data_ptr(),
                                    torch.cuda.current_stream().cuda_stream), ops)
    j["gflops"] = 2 * m * n * k / seconds / 1e9 if seconds else None


def timed_shapes(device: TorchDevice, jobs: list[dict], root: Path, failed: dict, deadline: float):
    """Per shape, dtype and layout (a job's "layout", default NN) of `jobs`, in order: cuBLAS and
    then every job timed on one set of operands (time_job); yields ((shape, dtype), jobs, cuBLAS GFLOPS or None, seconds taken,
    cuBLAS's relative error).
    Starts no shape after `deadline` (time.perf_counter)."""
    import torch

    from autotune import launch

    gpu = launch.device(torch.cuda.current_device())
    by_shape: dict[tuple, list[dict]] = {}
    for j in jobs:
        by_shape.setdefault((tuple(j["shape"]), j["dtype"], j.get("layout", "NN")), []).append(j)
    for index, ((shape, dtype, layout), group) in enumerate(by_shape.items()):
        if time.perf_counter() > deadline:
            print(f"time is up: {len(by_shape) - index} shapes not timed", flush=True)
            return
        started = time.perf_counter()
        m, n, k = shape
        ops = operands(torch, m, n, k, dtype, seed=index, layout=layout)
        blas, _, blas_error = timed(device, lambda: torch.matmul(ops.A, ops.B, out=ops.C), ops)
        for j in group:
            time_job(device, gpu, root, failed, j, ops)
        yield ((shape, dtype), group, 2 * m * n * k / blas / 1e9 if blas else None, time.perf_counter() - started,
               blas_error)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--records", action="store_true")
    parser.add_argument("--dtype")
    parser.add_argument("--seeds", type=int, nargs="*", default=[])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--shapes", nargs="*", default=[])
    parser.add_argument("--store")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=1e9, help="stop timing new shapes after this long")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    began = time.perf_counter()
    sm_count = 132
    if args.records:
        jobs = record_jobs(args.dtype)
    else:
        held_out = {tuple(map(int, s.split("x"))) for name, listed in suites().items() for s in listed}
        shapes = [tuple(map(int, s.split("x"))) for s in args.shapes]
        shapes += [s for seed in args.seeds for s in seeded_shapes(seed, args.count) if s not in held_out]
        jobs = training_jobs(list(dict.fromkeys(shapes)), sm_count)
    root = Path(args.store or tempfile.mkdtemp(prefix="mmtune-table-"))
    failed = build_all(jobs, root, args.jobs)

    from kernels import source_hashes

    device = TorchDevice()
    result = {"device": device.name, "label": args.label, "kernels": source_hashes(), "shapes": []}
    for (shape, dtype), group, blas_gflops, seconds, _ in timed_shapes(device, jobs, root, failed, began + args.seconds):
        done = [j for j in group if j.get("gflops")]
        best = max(done, key=lambda j: j["gflops"]) if done else None
        picked = [j for j in group if j.get("lookup") or j["source"] == "record"]
        result["shapes"].append({"shape": list(shape), "dtype": dtype, "category": category(*shape),
                                 "cublas_gflops": blas_gflops, "jobs": group})
        blas_gflops = blas_gflops or math.nan
        pick = picked[0].get("gflops") if picked else None
        print(f"{'x'.join(map(str, shape)):>16} {dtype} {category(*shape) or '-':>6} cuBLAS {blas_gflops:8.0f}"
              f"  best {best['gflops'] / blas_gflops if best else 0:5.3f} ({best['family'] if best else '-'}, "
              f"{best['source'] if best else '-'})  pick {pick / blas_gflops if pick else 0:5.3f}  "
              f"{len(done)}/{len(group)} ran  {seconds:4.1f} s", flush=True)
        Path(args.out).write_text(json.dumps(result, indent=0))
    print(f"done in {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
