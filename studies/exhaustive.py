"""Every feasible float32 config of one family at one shape, next to cuBLAS: the ground truth that
tests/test_search.py replays to check how fast the tuner gets near the best.

    python studies/exhaustive.py --family vector --shape 4096x4096x4096 --workers 8 --out DIR

Worker processes (each with its own CUDA context) compile and verify in parallel; timing takes a
file lock, so no two workers time at once (a verification launch of another worker may overlap
one sample of a timing; the median of 20 absorbs it). Writes DIR/exhaustive.json.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import multiprocessing
import time
from pathlib import Path


def sweep_part(part: int, configs: list[dict], family: str, shape, lock_path: str, out_path: str) -> None:
    import numpy as np
    from numba import cuda

    import kernels
    from autotune.measure import random_inputs, time_launches, verify

    m, n, k = shape
    rng = np.random.default_rng(part)
    A, B = random_inputs(m, n, k, "float32", rng)
    dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array((m, n), np.float32)
    with open(out_path, "w") as out, open(lock_path, "w") as lock:
        for config in configs:
            row = {"family": family, "config": config}
            try:
                kernel = kernels.build(family, config, "float32")
                started = time.perf_counter()
                kernel.compile()
                row["compile_s"] = time.perf_counter() - started
                check = verify(kernel, m, n, k, rng)
                row.update(verified=check.ok, error=check.error)
                if check.ok:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    try:
                        timing = time_launches(lambda: kernel.launch(dA, dB, dC))
                    finally:
                        fcntl.flock(lock, fcntl.LOCK_UN)
                    row.update(gflops=timing.gflops(m, n, k), median_ms=timing.median_ms, spread=timing.spread)
            except Exception as error:  # a config that fails is a row, not the end of the sweep
                row.update(verified=False, failure=f"{type(error).__name__}: {error}")
            out.write(json.dumps(row) + "\n")
            out.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="vector")
    parser.add_argument("--shape", default="4096x4096x4096")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    shape = tuple(int(x) for x in args.shape.split("x"))
    args.out.mkdir(parents=True, exist_ok=True)

    from autotune.measure import cublas_matmul, device_info, random_inputs, time_launches, versions
    from autotune.space import DeviceLimits, feasible_configs

    configs = feasible_configs(args.family, "float32", DeviceLimits())
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")  # a CUDA context must not be forked
    parts = [args.out / f"part{i}.jsonl" for i in range(args.workers)]
    workers = [
        context.Process(target=sweep_part, args=(i, configs[i :: args.workers], args.family, shape,
                                                 str(args.out / "timing.lock"), str(parts[i])))
        for i in range(args.workers)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    rows = [json.loads(line) for part in parts if part.exists() for line in part.read_text().splitlines()]

    import numpy as np
    from numba import cuda

    A, B = random_inputs(*shape, "float32", np.random.default_rng(0))
    dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array(shape[:2], np.float32)
    cublas = cublas_matmul()
    cublas_gflops = time_launches(lambda: cublas(dA, dB, dC)).gflops(*shape) if cublas else None
    timed = sorted((r for r in rows if "gflops" in r), key=lambda r: -r["gflops"])
    result = {
        **device_info(), **versions(), "family": args.family, "shape": list(shape), "configs": len(configs),
        "timed": len(timed), "wall_s": time.perf_counter() - started, "cublas_gflops": cublas_gflops, "rows": rows,
    }
    (args.out / "exhaustive.json").write_text(json.dumps(result))
    for part in parts:
        part.unlink(missing_ok=True)
    print(f"{len(configs)} configs, {len(timed)} timed, {result['wall_s']:.0f} s; cuBLAS {cublas_gflops or 0:,.0f} GFLOPS")
    for r in timed[:10]:
        print(f"{r['gflops']:9,.4g} {r['gflops'] / (cublas_gflops or 1):.3f} {r['config']}")


if __name__ == "__main__":
    main()
