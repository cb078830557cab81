"""How well the shipped configs transfer to shapes nobody tuned, and how close lookup's pick comes to the best of them.

    python3 studies/step22_transfer.py --out transfer.json [--seed 2222] [--count 20]

Validation shapes come from the seeded generator (autotune.peers.seeded_shapes) with another seed than
the bench's `seeded` suite, whose shapes are skipped, so that suite stays untouched. For each shape, on GPU
0 in one process: cuBLAS, lookup's pick (exact row, nearest row or cost model, as `matmul` would take it),
and every distinct shipped float32 NN config, each built for the shape (kernels.build_for) and verified and
timed by autotune.measure (the tuner's protocol). Writes the matrix as JSON after every shape and prints
lookup's pick and the best shipped config against cuBLAS. With --rows, also every verified measurement as a
cache row (the export format), as step 22 fed them to the cost model beside the records (rejected: see
docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from datetime import datetime, timezone

import numpy as np

import kernels
from autotune import backends
from autotune.measure import cublas_gflops, device_info, measure, versions
from autotune.peers import category, seeded_shapes
from autotune.records import shipped_rows, suites
from autotune.runtime import lookup


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=2222)
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--rows", help="also write every verified measurement here as cache rows")
    args = parser.parse_args()
    stamp = {**device_info(), **{k: v for k, v in versions().items() if k != "python"}}
    measured_rows = []
    backend = backends.current()
    device = backend.device()
    bench_suite = {tuple(map(int, s.split("x"))) for s in suites()["seeded"]}
    shapes = [s for s in seeded_shapes(args.seed, args.count) if s not in bench_suite]
    configs = {}
    for row in shipped_rows(device.name, "float32"):
        if (row.get("layout") or "NN") == "NN":
            configs.setdefault((row["family"], json.dumps(row["params"], sort_keys=True)), f"{row['m']}x{row['n']}x{row['k']}")
    built: dict[tuple, kernels.Kernel] = {}
    results = []
    for shape in shapes:
        started = time.perf_counter()
        text = "x".join(map(str, shape))
        choice = lookup(*shape, "float32", device)
        pick = (choice.family, json.dumps(choice.config, sort_keys=True))
        tried = dict(configs)
        tried.setdefault(pick, "lookup")
        figures = {}
        for (family, params), source in tried.items():
            key = (family, params, kernels.offset_bits_for(*shape), kernels.unaligned_for(*shape, "NN", "float32"))
            try:
                if key not in built:
                    built[key] = kernels.build_for(family, json.loads(params), "float32", shape)
                result = measure(built[key], *shape, np.random.default_rng(0))
                figures[f"{family} {params}"] = {"from": source, "gflops": result.gflops if result.verification.ok else 0.0}
                if result.verification.ok:
                    measured_rows.append({
                        **stamp, "dtype": "float32", "m": shape[0], "n": shape[1], "k": shape[2], "layout": "NN",
                        "family": family, "params": json.loads(params), "gflops": result.gflops,
                        "median_ms": result.timing.median_ms, "spread": result.timing.spread, "trials": 1,
                        "source_hash": kernels.source_hash(family), "study": f"transfer:seed-{args.seed}",
                        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    })
            except Exception as error:  # a config that cannot run here scores nothing
                figures[f"{family} {params}"] = {"from": source, "gflops": 0.0, "error": str(error)[:200]}
        blas = cublas_gflops(*shape, "float32", np.random.default_rng(0))
        best_name, best = max(figures.items(), key=lambda item: item[1]["gflops"])
        picked = figures[f"{pick[0]} {pick[1]}"]["gflops"]
        results.append({"shape": text, "category": category(*shape), "cublas_gflops": blas, "lookup_source": choice.source,
                        "lookup_basis": choice.basis, "lookup": f"{pick[0]} {pick[1]}", "configs": figures})
        print(f"{text:>16} {category(*shape) or '-':>6} {choice.source:>7}  lookup {picked / blas:5.3f}  best shipped "
              f"{best['gflops'] / blas:5.3f} (tuned at {best['from']})  cuBLAS {blas:7.0f}  "
              f"{time.perf_counter() - started:4.0f} s", flush=True)
        with open(args.out, "w") as handle:
            json.dump({"device": device.name, "seed": args.seed, "rows": results}, handle, indent=1)
        if args.rows:
            with open(args.rows, "w") as handle:
                json.dump(measured_rows, handle, indent=1)
    looked = [r["configs"][r["lookup"]]["gflops"] / r["cublas_gflops"] for r in results]
    best = [max(c["gflops"] for c in r["configs"].values()) / r["cublas_gflops"] for r in results]
    print(f"geomean vs cuBLAS: lookup {geomean([v for v in looked if v > 0]):.3f}, best shipped config "
          f"{geomean([v for v in best if v > 0]):.3f} over {len(results)} shapes")


if __name__ == "__main__":
    main()
