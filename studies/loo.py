"""Leave-one-out accuracy of the cost model (autotune.select.model) on the shipped records of this GPU.

    python3 studies/loo.py --out loo.json

For each shipped float32 NN record of this GPU model: the config the model predicts for its shape
from the records of the other shapes, and the record's own tuned config, both verified and timed
now, in this process, by autotune.measure.measurement (so the ratio compares like with like). Prints a table
and the geometric mean of predicted / tuned GFLOPS; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

import kernels
from autotune import backends
from autotune.measure.measurement import measure
from autotune.select.model import leave_one_out
from autotune.store.records import shipped_rows


def gflops(family: str, params: dict, shape: tuple[int, int, int], seed: int) -> float:
    result = measure(kernels.build(family, params, "float32"), shape, np.random.default_rng(seed))
    return result.gflops if result.verification.ok else 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    device = backends.current().device()
    rows = [r for r in shipped_rows(device.name, "float32") if r.layout == "NN"]
    results = []
    for entry in leave_one_out(rows, device):
        shape = (entry["m"], entry["n"], entry["k"])
        tuned = gflops(entry["tuned_family"], entry["tuned_params"], shape, 0)
        same = (entry["predicted_family"], entry["predicted_params"]) == (entry["tuned_family"], entry["tuned_params"])
        predicted = tuned if same else gflops(entry["predicted_family"], entry["predicted_params"], shape, 0)
        entry.update(tuned_gflops_now=tuned, predicted_gflops=predicted, ratio=predicted / tuned if tuned else None,
                     same_config=same)
        results.append(entry)
        print(f"{'x'.join(map(str, shape)):>16} tuned {entry['tuned_family']:>6} {tuned:8.0f}  predicted "
              f"{entry['predicted_family']:>6} {predicted:8.0f} GFLOPS  ratio {entry['ratio'] or 0:.3f}"
              f"{'  (same config)' if same else ''}", flush=True)
    ratios = [r["ratio"] for r in results if r["ratio"]]
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None
    print(f"geomean predicted / tuned: {geomean:.3f} over {len(ratios)} shapes; same config at "
          f"{sum(r['same_config'] for r in results)}")
    with open(args.out, "w") as handle:
        json.dump({"device": device.name, "geomean": geomean, "rows": results}, handle, indent=1)


if __name__ == "__main__":
    main()
