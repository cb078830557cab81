"""Every feasible float32 config of one family at one shape, next to cuBLAS: the ground truth that
tests/test_search.py replays to check how fast the tuner gets near the best.

    python studies/exhaustive.py --family vector --shape 4096x4096x4096 --out DIR [--gpus 4]
        [--workers 15] [--seconds 540] [--retime 40]

Worker processes (each with its own CUDA context on one GPU, `--workers` per GPU) take configs
from one list in a seeded random order, compile them in parallel, and check and time them
on their GPU one process at a time (a file lock per GPU): one launch into a poisoned output
checked against float64 reference rows, then the median of `--repeat` samples. A worker whose
launch fails (its CUDA context may be poisoned) writes the row and is replaced by a fresh one.
After `--seconds` no new config is started, so a sweep can be split over several runs: each run
appends its rows to DIR/rows.jsonl and skips the configs already there. Once every config has a
row, the `--retime` fastest are timed again by the full protocol (autotune.measure.measurement, 20 samples)
and DIR/exhaustive.json is written: the device, versions, cuBLAS and counts, and those re-timed
rows (the rows themselves stay in DIR/rows.jsonl).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import time
from pathlib import Path

SEED = 0
REFERENCE_ROWS = 256


def config_key(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def worker(gpu: int, todo: list[dict], taken, family: str, shape, repeat: int, deadline: float, out_dir: str) -> None:
    """Measure configs of `todo` on GPU `gpu`, taking the next untaken one (the shared counter
    `taken`) until none is left or the deadline passes; exits with status 3 after a failed
    launch, so the parent starts a fresh process. Each row carries the cuBLAS GFLOPS this worker
    measured on its GPU, for ratios that hold across GPUs."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = "1"
    import numpy as np
    from numba import cuda

    import kernels
    from autotune.measure.measurement import (
        all_written, cublas_matmul, error_bound, random_inputs, relative_error,
    )
    from autotune.measure.measurement import run_poisoned, time_launches
    from autotune.store.paths import exclusive

    m, n, k = shape
    rng = np.random.default_rng([SEED, gpu, os.getpid()])
    A, B = random_inputs(m, n, k, "float32", rng)
    rows = np.sort(rng.choice(m, min(m, REFERENCE_ROWS), replace=False))
    reference = A[rows].astype(np.float64) @ B.astype(np.float64)
    dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array((m, n), np.float32)
    lock = str(Path(out_dir) / f"gpu{gpu}.lock")
    cublas = cublas_matmul()
    with exclusive(lock):
        cublas_gflops = time_launches(lambda: cublas(dA, dB, dC)).gflops(m, n, k) if cublas else None
    with open(Path(out_dir) / "rows.jsonl", "a") as out:
        while time.time() < deadline:
            with taken.get_lock():
                index = taken.value
                taken.value += 1
            if index >= len(todo):
                return
            row = {"family": family, "config": todo[index], "gpu": gpu, "cublas_gflops": cublas_gflops}
            try:
                kernel = kernels.build(family, row["config"], "float32")
                started = time.perf_counter()
                kernel.compile()
                row["compile_s"] = time.perf_counter() - started
            except Exception as error:  # a config that does not compile is a row, not the end of the sweep
                row.update(verified=False, failure=f"{type(error).__name__}: {error}".splitlines()[0])
                out.write(json.dumps(row) + "\n")
                out.flush()
                continue
            try:
                with exclusive(lock):
                    result = run_poisoned(kernel, dA, dB)
                    ok = all_written(result)
                    if ok:
                        timing = time_launches(lambda: kernel.launch(dA, dB, dC), warmup=1, repeat=repeat)
                error = relative_error(result[rows], reference) if ok else float("inf")
                row.update(verified=error <= error_bound("float32", k), error=error)
                if row["verified"]:
                    row.update(gflops=timing.gflops(m, n, k), median_ms=timing.median_ms, spread=timing.spread)
            except Exception as error:
                row.update(verified=False, failure=f"{type(error).__name__}: {error}".splitlines()[0])
                out.write(json.dumps(row) + "\n")
                raise SystemExit(3) from None
            out.write(json.dumps(row) + "\n")
            out.flush()


def sweep(configs: list[dict], args, shape) -> None:
    """Run workers over the configs without a row yet until they are done or time is up."""
    done = {config_key(r["config"]) for r in read_rows(args.out)}
    todo = [c for c in configs if config_key(c) not in done]
    random.Random(SEED).shuffle(todo)
    print(f"{len(configs)} configs, {len(done)} already measured, {len(todo)} to go", flush=True)
    context = multiprocessing.get_context("spawn")  # a CUDA context must not be forked
    taken = context.Value("i", 0)
    deadline = time.time() + args.seconds
    slots = [(gpu, None) for gpu in range(args.gpus) for _ in range(args.workers)]

    def start(gpu):
        process = context.Process(target=worker, args=(gpu, todo, taken, args.family, shape, args.repeat, deadline, str(args.out)))
        process.start()
        return process

    slots = [(gpu, start(gpu)) for gpu, _ in slots]
    while any(p.is_alive() for _, p in slots):
        time.sleep(2)
        slots = [(gpu, start(gpu) if p.exitcode == 3 and time.time() < deadline else p) for gpu, p in slots]
    measured = len({config_key(r["config"]) for r in read_rows(args.out)})
    print(f"{measured} of {len(configs)} measured", flush=True)


def read_rows(out: Path) -> list[dict]:
    path = out / "rows.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def retime(rows: list[dict], args, shape) -> tuple[dict, list[dict]]:
    """The `--retime` fastest rows again by the full protocol, next to cuBLAS, in this process."""
    import numpy as np
    from numba import cuda

    import kernels
    from autotune.measure.measurement import cublas_matmul, device_info, measure, random_inputs, time_launches, versions

    rng = np.random.default_rng(SEED)
    A, B = random_inputs(*shape, "float32", rng)
    dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array(shape[:2], np.float32)
    cublas = cublas_matmul()
    cublas_gflops = time_launches(lambda: cublas(dA, dB, dC)).gflops(*shape) if cublas else None
    best = {}  # a config measured twice (runs that overlapped) counts once, by its faster row
    for row in sorted((r for r in rows if "gflops" in r), key=lambda r: r["gflops"]):
        best[config_key(row["config"])] = row
    fastest = sorted(best.values(), key=lambda r: -r["gflops"])[: args.retime]
    for row in fastest:
        result = measure(kernels.build(args.family, row["config"], "float32"), shape, rng)
        row["retimed_gflops"] = result.gflops
        print(f"{row['gflops']:9,.0f} -> {result.gflops:9,.0f} {result.gflops / (cublas_gflops or 1):.3f} {row['config']}",
              flush=True)
    return {**device_info(), **versions(), "cublas_gflops": cublas_gflops}, fastest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="vector")
    parser.add_argument("--shape", default="4096x4096x4096")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--workers", type=int, default=8, help="worker processes per GPU")
    parser.add_argument("--repeat", type=int, default=5, help="timed samples per config")
    parser.add_argument("--seconds", type=float, default=540, help="start no config after this long")
    parser.add_argument("--retime", type=int, default=40)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    shape = tuple(int(x) for x in args.shape.split("x"))
    args.out.mkdir(parents=True, exist_ok=True)

    from autotune.space.configs import DeviceLimits, feasible_configs

    configs = feasible_configs(args.family, "float32", DeviceLimits())
    started = time.perf_counter()
    sweep(configs, args, shape)
    rows = read_rows(args.out)
    if len({config_key(r["config"]) for r in rows}) < len(configs):
        print(f"incomplete after {time.perf_counter() - started:.0f} s: run again to go on")
        return
    info, retimed = retime(rows, args, shape)
    timed = {config_key(r["config"]) for r in rows if "gflops" in r}
    result = {**info, "family": args.family, "shape": list(shape), "configs": len(configs), "timed": len(timed),
              "rows": len(rows), "repeat": args.repeat, "retimed": retimed}
    (args.out / "exhaustive.json").write_text(json.dumps(result))
    print(f"{len(configs)} configs, {len(timed)} timed; cuBLAS {info['cublas_gflops'] or 0:,.0f} GFLOPS")


if __name__ == "__main__":
    main()
