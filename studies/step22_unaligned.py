"""Operands with unaligned rows: the untested narrow path for blocks inside C against the tested path everywhere.

    python3 studies/step22_unaligned.py --out unaligned.json [--shapes 1023x1025x999 ...]

Where an operand's rows are not a multiple of 16 bytes (N or K not a multiple of 4 in float32),
16-byte moves cannot serve it. Before step 22 every block then took the k-loop with bounds tests;
now a block inside C takes an untested loop that moves such parts one element per thread
(`kernels.build(..., unaligned=True)`). For each shape, its own shipped float32 record's config and a
few other shipped configs (the tiles the tuner chose at aligned shapes) are built both ways and
verified and timed by autotune.measure (the tuner's protocol), interleaved, in one process, next
to cuBLAS timed the same way. Aligned shapes are controls: the switch must not change them. Prints
a table of GFLOPS and registers; writes JSON.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import kernels
from autotune import backends
from autotune.measure import cublas_gflops, measure
from autotune.records import shipped_rows

SHAPES = ["1023x1025x999", "257x5003x1031", "777x1555x333", "2047x2049x2047", "1500x3001x999", "4095x4097x1023",
          "1024x1024x1024"]
#: shipped configs tried at every shape, by the shape whose record holds them
CANDIDATES = ["1024x1024x1024", "4096x4096x4096", "2000x2000x2000", "257x5003x1031", "1023x1025x999"]


def built(family: str, params: dict, unaligned: bool, kernels_built: dict) -> kernels.Kernel:
    """The kernel for a config, built either way and compiled once per process."""
    key = (family, json.dumps(params, sort_keys=True), unaligned)
    if key not in kernels_built:
        kernels_built[key] = kernels.build(family, params, "float32", unaligned=unaligned)
        kernels_built[key].compile()
    return kernels_built[key]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", nargs="*", default=SHAPES)
    args = parser.parse_args()
    device = backends.current().device()
    rows = {f"{r['m']}x{r['n']}x{r['k']}": r for r in shipped_rows(device.name, "float32")
            if (r.get("layout") or "NN") == "NN"}
    results, kernels_built = [], {}
    for text in args.shapes:
        shape = tuple(map(int, text.split("x")))
        blas = cublas_gflops(*shape, "float32", np.random.default_rng(0))
        sources = ([text] if text in rows else []) + [c for c in CANDIDATES if c != text]
        seen = set()
        for source in sources:
            row = rows[source]
            key = (row["family"], json.dumps(row["params"], sort_keys=True))
            if key in seen:
                continue
            seen.add(key)
            figures = {"tested": [], "narrow": []}
            registers = {}
            for _ in range(2):
                for name, narrow in (("tested", False), ("narrow", True)):
                    kernel = built(row["family"], row["params"], narrow, kernels_built)
                    result = measure(kernel, *shape, np.random.default_rng(0))
                    figures[name].append(result.gflops if result.verification.ok else 0.0)
                    registers[name] = kernel.compile().get_regs_per_thread()
            best = {name: max(values) for name, values in figures.items()}
            results.append({"shape": text, "config_from": source, "family": row["family"], "params": row["params"],
                            "gflops": figures, "registers": registers, "cublas_gflops": blas})
            print(f"{text:>16} cfg {source:>16} {row['family']:>6}  tested {best['tested']:7.0f} "
                  f"narrow {best['narrow']:7.0f}  x{best['narrow'] / max(best['tested'], 1):5.3f}  "
                  f"vs cuBLAS {best['tested'] / blas:5.3f} -> {best['narrow'] / blas:5.3f}  "
                  f"regs {registers['tested']}/{registers['narrow']}", flush=True)
    with open(args.out, "w") as handle:
        json.dump({"device": device.name, "rows": results}, handle, indent=1)


if __name__ == "__main__":
    main()
