"""Two revisions of the kernels side by side: each config built from this checkout's `kernels`
and from an older copy of the package, verified, then timed in alternating rounds on the same
arrays as cuBLAS, in one process. A config with a parameter the old package lacks is built new
only.

    git archive REV kernels | tar -x -C DIR
    python studies/compare_kernels.py --old DIR/kernels --configs FILE --shapes 4096x4096x4096 --out OUT
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import numpy as np
from numba import cuda

import kernels
from autotune.measure.measurement import cublas_matmul, device_info, random_inputs, time_launches, verify, versions


def import_old(package_dir: Path):
    """The package at `package_dir` under the name `old_kernels` (its relative imports stay inside)."""
    spec = importlib.util.spec_from_file_location(
        "old_kernels", package_dir / "__init__.py", submodule_search_locations=[str(package_dir)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_kernels"] = module
    spec.loader.exec_module(module)
    return module


def builds(old, family: str, config: dict) -> dict:
    """{"new": kernel, "old": kernel} for `config`; "old" only where the old package has every key."""
    built = {"new": kernels.build(family, config, "float32")}
    old_space = old.family(family).space
    if set(config) <= set(old_space):
        built["old"] = old.build(family, config, "float32")
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="an older kernels/ package directory")
    parser.add_argument("--configs", type=Path, required=True, help="JSON [[family, config], ...]")
    parser.add_argument("--shapes", default="4096x4096x4096")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    old = import_old(args.old)
    listed = json.loads(args.configs.read_text())
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    rng = np.random.default_rng(0)
    cublas = cublas_matmul()
    built = [(family, config, builds(old, family, config)) for family, config in listed]
    rows = []
    print(device_info(), versions())
    print(f"{'shape':>16} {'revision':8} {'GFLOPS':>9} {'cuBLAS':>9} {'ratio':>6} {'error':7}  config")
    for shape in shapes:
        A, B = random_inputs(*shape, "float32", rng)
        dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array(shape[:2], np.float32)
        for family, config, variants in built:
            samples = {name: [] for name in variants}
            cublas_samples = []
            checks = {name: verify(kernel, *shape, rng) for name, kernel in variants.items()}
            for _ in range(args.rounds):
                cublas_samples.append(time_launches(lambda: cublas(dA, dB, dC)).gflops(*shape))
                for name, kernel in variants.items():
                    if checks[name].ok:
                        samples[name].append(time_launches(lambda: kernel.launch(dA, dB, dC)).gflops(*shape))
            cublas_gflops = statistics.median(cublas_samples)
            for name, check in checks.items():
                row = dict(family=family, config=config, revision=name, m=shape[0], n=shape[1], k=shape[2],
                           verified=check.ok, error=check.error, cublas_gflops=cublas_gflops)
                if samples[name]:
                    gflops = statistics.median(samples[name])
                    row.update(gflops=gflops, rounds=samples[name], ratio=gflops / cublas_gflops)
                rows.append(row)
                params = ",".join(f"{k}={v}" for k, v in config.items())
                result = f"{row['gflops']:9.0f} {cublas_gflops:9.0f} {row['ratio']:6.3f}" if "gflops" in row else "   FAILED"
                print(f"{'x'.join(map(str, shape)):>16} {name:8} {result} {check.error:.1e}  {params}", flush=True)
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "compare.json").write_text(json.dumps({**device_info(), **versions(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
