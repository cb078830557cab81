"""Stream-K candidates for the shipped measured table: every tile of the table, streamed, timed at
every training shape of the table.

    python3 studies/step30_table.py --out part.json [--part 0/2] [--store DIR] [--seconds S]

At each shape of autotune/data/measured/<this GPU>.json: each of the table's tiles with the
"stream" policy (autotune.neighbours.config_for: fitted to the shape, STREAM_WORKERS blocks per
SM), candidates that come to the same config being one job; and, as an anchor, the table's best
candidate there, timed again, whose speed now over its speed in the table says how far this run's
timings sit from the table's. Built and timed as studies/step23_table.py does (driver plans on
PyTorch tensors, CUDA graphs, torch.matmul alongside). --part i/n times every n-th shape from the
i-th, so that the work can span device calls sharing one --store. Writes the JSON after every shape.

    python3 studies/step30_table.py --ship autotune/data/measured/nvidia-h200.json PART.json[.xz]...

adds the parts' stream-K speeds to that table, scaled by each shape's anchor (so that they compare
with the speeds measured before), and prints its leave-one-out accuracy before and after.
"""

from __future__ import annotations

import argparse
import json
import lzma
import math
import tempfile
import time
from pathlib import Path

from step23_table import build_all, timed_shapes  # studies/, the script's folder

from autotune.neighbours import STREAM, candidate_name, config_for, dumps, leave_one_out
from autotune.space import infeasibility
from kernels.base import Config, DeviceLimits

SM_COUNT = 132
TABLE = Path(__file__).resolve().parent.parent / "autotune" / "data" / "measured" / "nvidia-h200.json"


def shape_jobs(table: dict, shape: dict) -> list[dict]:
    limits = DeviceLimits.for_cc("9.0")
    m, n, k = shape["m"], shape["n"], shape["k"]
    found: dict[str, dict] = {}
    for index, tile in enumerate(table["tiles"]):
        family, params = config_for(tile, STREAM, m, n, k, SM_COUNT)
        if infeasibility(family, params, "float32", limits) is not None:
            continue
        key = Config.of(family, params).key
        found.setdefault(key, {"family": family, "params": params, "dtype": "float32", "shape": [m, n, k],
                               "candidates": []})
        found[key]["candidates"].append(candidate_name(index, STREAM))
    best = max(shape["gflops"], key=shape["gflops"].get)
    tile, policy = best.split(":")
    family, params = config_for(table["tiles"][int(tile)], policy, m, n, k, SM_COUNT)
    found.setdefault(Config.of(family, params).key, {"family": family, "params": params, "dtype": "float32",
                                                     "shape": [m, n, k], "candidates": []})["anchor"] = best
    return list(found.values())


def loo(table: dict) -> str:
    rows = leave_one_out(table, SM_COUNT)
    mean = {key: math.exp(sum(math.log(r[key]) for r in rows) / len(rows)) for key in ("of_best", "vs_cublas")}
    oracle = math.exp(sum(math.log(max(s["gflops"].values()) / s["cublas_gflops"]) for s in table["shapes"])
                      / len(table["shapes"]))
    low = sum(r["vs_cublas"] < 0.75 for r in rows)
    return (f"best candidate {oracle:.3f}x cuBLAS; leave-one-out pick {mean['of_best']:.3f} of the best, "
            f"{mean['vs_cublas']:.3f}x cuBLAS, {low} of {len(rows)} shapes below 0.75x")


def ship(out: str, parts: list[str], field: str = "stream_kernels") -> None:
    """Replace the table's speeds of the parts' candidates, each shape's scaled by its anchor;
    the parts' kernel hashes go into `field`."""
    table = json.loads(Path(out).read_text())
    print(f"before: {loo(table)}")
    measured = {}
    for path in parts:
        text = (lzma.open(path, "rt") if path.endswith(".xz") else open(path)).read()
        for entry in json.loads(text)["shapes"]:
            measured[tuple(entry["shape"])] = entry["jobs"]
    scales = []
    for shape in table["shapes"]:
        jobs = measured.get((shape["m"], shape["n"], shape["k"]))
        anchor = next((j for j in jobs or () if j.get("anchor") and j.get("gflops")), None)
        if anchor is None:
            continue
        scale = shape["gflops"][anchor["anchor"]] / anchor["gflops"]
        scales.append(scale)
        for job in jobs:
            for name in job["candidates"] if job.get("gflops") else ():
                shape["gflops"][name] = round(job["gflops"] * scale, 1)
    table[field] = json.loads(Path(parts[0]).read_text() if not parts[0].endswith(".xz")
                                         else lzma.open(parts[0], "rt").read())["kernels"]
    Path(out).write_text(dumps(table))
    scales.sort()
    print(f"{len(scales)} shapes; table / anchor now: median {scales[len(scales) // 2]:.3f}, "
          f"range {scales[0]:.3f}-{scales[-1]:.3f}")
    print(f"after: {loo(table)}")


def table_arguments() -> argparse.ArgumentParser:
    """The options of a study timing a slice of the table's candidates (--part) or shipping
    its parts' speeds into the table (--ship)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--ship", nargs="+", metavar=("TABLE", "PART"), help="put the parts' speeds in TABLE")
    parser.add_argument("--out")
    parser.add_argument("--part", default="0/1")
    parser.add_argument("--store")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=1e9, help="stop timing new shapes after this long")
    return parser


def part_of(shapes: list, part: str) -> list:
    """The shapes of part "i/n": every n-th from the i-th."""
    index, parts = map(int, part.split("/"))
    return shapes[index::parts]


def main() -> None:
    args = table_arguments().parse_args()
    if args.ship:
        return ship(args.ship[0], args.ship[1:])
    began = time.perf_counter()
    table = json.loads(TABLE.read_text())
    shapes = part_of(table["shapes"], args.part)
    jobs = [job for shape in shapes for job in shape_jobs(table, shape)]
    time_anchored(jobs, args.out, args.store, args.jobs, began + args.seconds, "stream")


def time_anchored(jobs: list[dict], out: str, store: str | None, workers: int, deadline: float, label: str) -> None:
    """Build `jobs` (each with the table's `candidates` it stands for, one of them per shape an
    `anchor`) into `store` on `workers` processes, time them shape by shape until `deadline`
    (time.perf_counter), print each shape's best job (`label`) and its anchor, and write the JSON
    to `out` after every shape."""
    began = time.perf_counter()
    root = Path(store or tempfile.mkdtemp(prefix=f"mmtune-{label}-table-"))
    failed = build_all(jobs, root, workers)

    from autotune.peers import TorchDevice
    from kernels import source_hashes

    device = TorchDevice()
    result = {"device": device.name, "kernels": source_hashes(), "shapes": []}
    for (shape, _), group, blas, seconds, _ in timed_shapes(device, jobs, root, failed, deadline):
        result["shapes"].append({"shape": list(shape), "cublas_gflops": blas, "jobs": group})
        done = [j for j in group if j.get("gflops") and j["candidates"]]
        anchor = next((j for j in group if j.get("anchor")), {})
        best = max(done, key=lambda j: j["gflops"]) if done else None
        blas = blas or math.nan
        print(f"{'x'.join(map(str, shape)):>16} cuBLAS {blas:8.0f}  best {label} {best['gflops'] / blas if best else 0:5.3f}"
              f" ({','.join(best['candidates'][:2]) if best else '-'})  anchor {anchor.get('anchor')} "
              f"{(anchor.get('gflops') or 0) / blas:5.3f}  {len(done)} ran  {seconds:4.1f} s", flush=True)
        Path(out).write_text(json.dumps(result, indent=0))
    print(f"done in {time.perf_counter() - began:.0f} s", flush=True)

if __name__ == "__main__":
    main()
