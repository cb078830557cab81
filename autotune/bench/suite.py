"""mmtune bench: the kernel `matmul` would use, next to cuBLAS and the seed kernels, shape by shape.

For each shape, in one process and on the same device arrays: the tuned kernel (`lookup` says
whether the shape was tuned or which fallback was used), cuBLAS through CuPy (TF32 off), and the
seed kernels (naive with 16x16 blocks; shared TPB=16). Every kernel is verified at the shape
before it is timed, and every one, cuBLAS included, is timed on device time (the backend's `timing_method`),
so small shapes compare kernels, not Python's launch cost. Writes bench.json and bench.png;
`mmtune bench --peers` (autotune.bench.peers) times the path users call instead.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

import kernels
from autotune import backends
from autotune.bench.figures import save_png
from autotune.measure.measurement import cublas_matmul, device_info, random_inputs, time_launches, verify, versions
from autotune.select.lookup import kernel_for, lookup
from autotune.store.records import suites as shipped_suites

SEEDS = {"naive": ("naive", {"block_x": 16, "block_y": 16}), "shared": ("shared", {"tpb": 16, "pad": 0})}


def parse_shapes(spec: str) -> list[tuple[int, int, int]]:
    """A suite name (autotune/data/suites.json), or shapes like 1024x1024x1024,4096x512x64."""
    suites = shipped_suites()
    names = suites.get(spec, spec.split(","))
    shapes = []
    for name in names:
        parts = name.strip().lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"{name!r} is neither a suite ({', '.join(suites)}) nor a shape MxNxK")
        shapes.append(tuple(int(p) for p in parts))
    return shapes


def bench(shapes, dtype: str = "float32", out_dir: Path | None = None, seeds: bool = True, repeat: int = 20,
          precision: str | None = None) -> dict:
    """Each shape's kernel for `precision` (autotune.space.precision; default its default), cuBLAS and the
    seed kernels, verified and timed on the same arrays."""
    from numba import cuda

    rng = np.random.default_rng(0)
    cublas = cublas_matmul() if dtype != "int32" else None
    rows = []
    for m, n, k in shapes:
        A, B = random_inputs(m, n, k, dtype, rng)
        dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array((m, n), A.dtype)
        choice = lookup(m, n, k, dtype, precision=precision)
        row = {"m": m, "n": n, "k": k, "source": choice.source, "family": choice.family, "config": choice.config,
               "precision": choice.precision}
        row["cublas_gflops"] = time_launches(lambda: cublas(dA, dB, dC), repeat=repeat).gflops(m, n, k) if cublas else None
        shape = (m, n, k)
        row["tuned_gflops"] = _verified_gflops(kernel_for(choice, dtype, shape), shape, rng, (dA, dB, dC), repeat)
        for name, (family, config) in (SEEDS.items() if seeds else ()):
            seed_kernel = kernels.build_for(family, config, dtype, shape)
            row[f"{name}_gflops"] = _verified_gflops(seed_kernel, shape, rng, (dA, dB, dC), repeat)
        row["ratio"] = row["tuned_gflops"] / row["cublas_gflops"] if row["cublas_gflops"] and row["tuned_gflops"] else None
        rows.append(row)
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    result = {
        **device_info(), **versions(), "dtype": dtype, "timing": backends.current().timing_method, "rows": rows,
        "geomean_ratio": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
    }
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "bench.json").write_text(json.dumps(result, indent=1))
        chart(result, out_dir / "bench.png")
    return result


def _verified_gflops(kernel, shape, rng, arrays, repeat) -> float | None:
    """GFLOPS on the shared device `arrays` (A, B, C), or None if the kernel is wrong at this shape."""
    if not verify(kernel, *shape, rng).ok:
        return None
    return time_launches(lambda: kernel.launch(*arrays), repeat=repeat).gflops(*shape)


def chart(result: dict, path: Path) -> None:
    """Bars of GFLOPS per shape: tuned, cuBLAS and the seeds (log scale), ratio to cuBLAS on top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    series = [("tuned", "tuned_gflops"), ("cuBLAS", "cublas_gflops"), ("naive (seed)", "naive_gflops"), ("shared TPB=16 (seed)", "shared_gflops")]
    series = [(label, key) for label, key in series if any(r.get(key) for r in rows)]
    width = 0.8 / max(len(series), 1)
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(rows)), 5))
    for i, (label, key) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(rows))]
        ax.bar(xs, [r.get(key) or 0 for r in rows], width, label=label)
    for j, r in enumerate(rows):
        if r.get("ratio"):
            ax.annotate(f"{r['ratio']:.2f}x", (j, r["tuned_gflops"]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), [f"{r['m']}x{r['n']}x{r['k']}" for r in rows], rotation=30, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("GFLOPS")
    geomean = result.get("geomean_ratio")
    ax.set_title(f"{result['device']} {result['dtype']}" + (f": tuned / cuBLAS geomean {geomean:.2f}x" if geomean else ""))
    ax.legend()
    fig.tight_layout()
    save_png(fig, path)
