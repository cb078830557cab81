"""A ladder of kernel configs on a few shapes, next to cuBLAS.

Each kernel is verified on fresh random inputs at the shape, then timed by the protocol of
autotune.measure.measurement on the same device arrays cuBLAS (CuPy, TF32 off) is timed on, in this process.

    python studies/ladder.py --out DIR [--shapes 1024x1024x1024,4096x4096x4096]
        every family: the seed kernels, defaults and a few register configs (float32), and each
        family's default in float64 and int32 at the first shape
    python studies/ladder.py --out DIR --family vector --sample 150 [--top 15]
        a seeded sample of one family's feasible float32 configs at the first shape, then the
        `top` fastest of them at the other shapes
    python studies/ladder.py --out DIR --configs FILE
        the float32 configs listed in FILE (JSON: [[family, config], ...]) at every shape
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from numba import cuda

import kernels
from autotune.measure.measurement import cublas_matmul, device_info, random_inputs, time_launches, verify, versions
from autotune.space.configs import device_limits, sample_configs

R = dict(pad=4, mapping="strided", prefetch=True)
FLOAT32_CONFIGS = [
    ("naive", {"block_x": 16, "block_y": 16}),  # the seed's launch shape
    ("naive", {"block_x": 32, "block_y": 8}),
    ("shared", {"tpb": 16, "pad": 0}),  # the seed's fast_matmul, fixed
    ("shared", {"tpb": 16, "pad": 1}),
    ("shared", {"tpb": 32, "pad": 1}),
    ("register", kernels.register.DEFAULT),
    ("register", dict(bm=128, bn=128, bk=8, tm=4, tn=8, **R)),  # design.md's best plain kernel
    ("register", dict(bm=128, bn=128, bk=8, tm=8, tn=8, **R)),
    ("register", dict(bm=128, bn=64, bk=16, tm=8, tn=4, **R)),
    ("register", dict(bm=128, bn=128, bk=8, tm=4, tn=8, pad=4, mapping="contiguous", prefetch=True)),
    ("register", dict(bm=128, bn=128, bk=8, tm=4, tn=8, pad=4, mapping="strided", prefetch=False)),
    ("register", dict(bm=128, bn=128, bk=8, tm=4, tn=8, pad=0, mapping="strided", prefetch=True)),
]
OTHER_DTYPES = ["float64", "int32"]  # each family's default, at the first shape


def registers(kernel) -> int:
    regs = kernel.compile().get_regs_per_thread()
    return next(iter(regs.values())) if isinstance(regs, dict) else int(regs)


def ladder_plan(shapes):
    plan = [(shape, "float32", fam, cfg) for shape in shapes for fam, cfg in FLOAT32_CONFIGS]
    plan += [(shapes[0], dt, fam, mod.DEFAULT) for dt in OTHER_DTYPES for fam, mod in kernels.FAMILIES.items()]
    return plan


def run(plan, out: Path, rows: list | None = None) -> list[dict]:
    rng = np.random.default_rng(0)
    cublas = cublas_matmul()
    rows = [] if rows is None else rows
    baselines: dict = {}
    built: dict = {}  # a config listed at several shapes compiles once
    for (m, n, k), dtype, family, config in plan:
        key = (m, n, k, dtype)
        if key not in baselines:
            A, B = random_inputs(m, n, k, dtype, rng)
            dA, dB = cuda.to_device(A), cuda.to_device(B)
            dC = cuda.device_array((m, n), A.dtype)
            timing = time_launches(lambda: cublas(dA, dB, dC)) if cublas and dtype != "int32" else None
            baselines[key] = (dA, dB, dC, timing.gflops(m, n, k) if timing else None)
        dA, dB, dC, cublas_gflops = baselines[key]
        name = (family, json.dumps(config, sort_keys=True), dtype)
        kernel = built[name] = built.get(name) or kernels.build(family, config, dtype)
        row = dict(family=family, config=config, dtype=dtype, m=m, n=n, k=k)
        try:
            check = verify(kernel, m, n, k, rng)
            row.update(verified=check.ok, error=check.error, registers=registers(kernel))
            if check.ok:
                timing = time_launches(lambda: kernel.launch(dA, dB, dC))
                gflops = timing.gflops(m, n, k)
                row.update(gflops=gflops, median_ms=timing.median_ms, spread=timing.spread)
                row.update(cublas_gflops=cublas_gflops, ratio=gflops / cublas_gflops if cublas_gflops else None)
        except Exception as error:  # a config that fails is a row of the table, not the end of it
            row.update(verified=False, failure=f"{type(error).__name__}: {error}")
        rows.append(row)
        print(format_row(row), flush=True)
        out.mkdir(parents=True, exist_ok=True)
        (out / "ladder.json").write_text(json.dumps({**device_info(), **versions(), "rows": rows}, indent=1))
    return rows


def fastest(rows: list[dict], shape, count: int) -> list[tuple[str, dict]]:
    timed = [r for r in rows if (r["m"], r["n"], r["k"]) == shape and "gflops" in r]
    return [(r["family"], r["config"]) for r in sorted(timed, key=lambda r: -r["gflops"])[:count]]


def format_row(row: dict) -> str:
    shape = f"{row['m']}x{row['n']}x{row['k']}"
    params = ",".join(f"{k}={v}" for k, v in row["config"].items())
    if "gflops" not in row:
        return f"{shape:>16} {row['dtype']:8} {row['family']:9} FAILED {row.get('failure') or row.get('error')} {params}"
    ratio = f"{row['ratio']:.3f}" if row.get("ratio") else "-"
    cublas = f"{row['cublas_gflops']:9.0f}" if row.get("cublas_gflops") else "        -"
    return (
        f"{shape:>16} {row['dtype']:8} {row['family']:9} {row['gflops']:9.0f} {cublas} {ratio:>6}"
        f" {row['registers']:4d} {row['error']:.1e}  {params}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1024x1024x1024,4096x4096x4096,1023x1025x999")
    parser.add_argument("--out", type=Path, default=Path("ladder-out"))
    parser.add_argument("--family", help="sweep a sample of this family instead of the fixed ladder")
    parser.add_argument("--configs", type=Path, help="time these [family, config] pairs instead of the fixed ladder")
    parser.add_argument("--sample", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    print(device_info(), versions())
    print(f"{'shape':>16} {'dtype':8} {'family':9} {'GFLOPS':>9} {'cuBLAS':>9} {'ratio':>6} {'regs':>4} {'error':7}  config")
    if args.configs:
        listed = json.loads(args.configs.read_text())
        run([(shape, "float32", family, config) for shape in shapes for family, config in listed], args.out)
        return
    if not args.family:
        run(ladder_plan(shapes), args.out)
        return
    configs = sample_configs(args.family, "float32", device_limits(), args.sample, args.seed)
    rows = run([(shapes[0], "float32", args.family, c) for c in configs], args.out)
    best = fastest(rows, shapes[0], args.top)
    run([(shape, "float32", f, c) for shape in shapes[1:] for f, c in best], args.out, rows)
    for shape in shapes:
        print(f"fastest at {'x'.join(map(str, shape))}:")
        for family, config in fastest(rows, shape, args.top):
            print(format_row(next(r for r in rows if (r["m"], r["n"], r["k"]) == shape and r["config"] == config and r["family"] == family)))


if __name__ == "__main__":
    main()
