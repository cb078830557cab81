"""The shipped records of one family on this GPU, each timed next to the same config with some
parameters set otherwise, back to back in one process, next to cuBLAS: a table of both, and the
rows of the variants that ran faster than their record's config, for `mmtune promote --from`.

    python3 studies/variant_rows.py --family wgmma --set producer=1 --out DIR

Every kernel is built first, each in a process of its own (autotune.store.background), all at once.
DIR/table.json has, per record, both configs' GFLOPS and cuBLAS's (TF32 off); DIR/rows.json the
winning variants as cache rows (today's code, this GPU). A variant that is infeasible at a record
(autotune.space.configs.infeasibility) or gives a wrong product is listed with the reason.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

import kernels
from autotune import backends
from autotune.measure.measurement import cublas_gflops, measure, versions
from autotune.space.configs import device_limits, infeasibility
from autotune.store import background, records
from autotune.store.cubins import BuildKey
from autotune.tune.finalists import FINAL_LAUNCHES
from kernels import Config


def setting(text: str) -> tuple[str, object]:
    name, value = text.split("=", 1)
    return name, json.loads(value)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", required=True)
    parser.add_argument("--set", type=setting, action="append", required=True, help="NAME=JSON value, repeatable")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = backends.current().device()
    hashes, toolchain = kernels.source_hashes(), versions()
    shipped = [row for row in records.shipped_rows() if row.device == device.name and row.family == args.family]
    variants = [(row, {**row.params, **dict(args.set)}) for row in shipped]
    builds = [background.start(BuildKey.of(Config.of(row.family, params), row.dtype, row.shape, row.layout, device.cc))
              for row, variant in variants for params in (row.params, variant)
              if infeasibility(row.family, params, row.dtype, device_limits()) is None]
    for build in builds:
        build.wait()
    for build in builds:
        if build.failed:
            print(f"{build.key.config.key} ({build.key.layout}) did not build; measuring it will say why", flush=True)
    rng = np.random.default_rng(0)
    table, winners = [], []
    for row, variant in variants:
        entry = {"shape": row.shape, "layout": row.layout, "precision": row.precision, "record": row.params,
                 "variant": variant}
        reason = infeasibility(row.family, variant, row.dtype, device_limits())
        if reason or variant == row.params:
            table.append({**entry, "skipped": reason or "the record's own config"})
            continue
        timed = {}
        for name, params in (("record", row.params), ("variant", variant)):
            kernel = kernels.build_for(row.family, params, row.dtype, row.shape, row.layout)
            timed[name] = measure(kernel, row.shape, rng, repeat=FINAL_LAUNCHES)
        cublas = cublas_gflops(*row.shape, row.dtype, rng)
        ok = {name: result.verification.ok for name, result in timed.items()}
        gflops = {name: round(result.gflops, 1) for name, result in timed.items()}
        table.append({**entry, "ok": ok, "gflops": gflops, "cublas_gflops": round(cublas, 1) if cublas else None,
                      "speedup": round(gflops["variant"] / gflops["record"], 3) if gflops["record"] else None})
        print(json.dumps(table[-1]), flush=True)
        result = timed["variant"]
        if ok["variant"] and result.gflops > timed["record"].gflops:
            winners.append(replace(
                row, params=variant, gflops=result.gflops, median_ms=result.timing.median_ms,
                spread=result.timing.spread, trials=None, cc=device.cc, sm_count=device.sm_count,
                driver=device.driver, source_hash=hashes[row.family], created=None, study=None,
                numba=toolchain["numba"], numba_cuda=toolchain["numba_cuda"]).as_dict())
    (args.out / "table.json").write_text(json.dumps(table, indent=1) + "\n")
    (args.out / "rows.json").write_text(json.dumps(winners, indent=1) + "\n")
    print(f"{len(winners)} of {len(shipped)} records ran faster with {dict(args.set)}")


if __name__ == "__main__":
    main()
