"""The measured table behind lookup's choice for shapes nobody tuned, with fitted tiles and three
split policies: every candidate timed on many training shapes through the path users call.

    python3 studies/step24_table.py --out table.json --seeds 2222 4444 5555 6666 7777 --count 20 \
        --skinny 7 --skinny-count 24 [--part 0/2] [--shapes 1500x1500x1500 ...]

A candidate is a tile and a split policy (autotune.neighbours): the tiles of the shipped float32
NN records, the shape rule's (autotune.space.SKINNY_TILE and FEW_TILE with its pipeline), and at
skinny shapes SKINNY_VARIANTS too; each is fitted to the shape (autotune.space.fit_tile) and split
as the policy says there (whole, split, deep: autotune.space.SPLIT_POLICIES). Candidates that come
to the same config at a shape are one job. Training shapes: --shapes, autotune.peers.seeded_shapes
for each of --seeds, and --skinny-count skinny shapes (short side log-uniform in 1..64) drawn with
seed --skinny, none of them in the bench's suites. Lookup's own pick is timed too. The tiles are
those of the records at the time; the shipped table keeps the list it was measured with.

Builds and timing are step 23's (studies/step23_table.py): every kernel built into a store by
--jobs processes at once, then each job launched through the driver plan `matmul` uses on PyTorch
tensors, checked against float64 rows and timed by CUDA events around a CUDA graph, next to
torch.matmul (cuBLAS, TF32 off). --part i/n times every n-th shape from the i-th, so that the work
can span device calls sharing one --store. Writes the JSON after every shape.

    python3 studies/step24_table.py --ship autotune/data/measured/nvidia-h200.json PART.json[.gz]...

merges the parts' shapes into the table lookup ships (autotune.neighbours.table_of) and prints its
leave-one-out accuracy.
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import math
import random
import tempfile
import time
from pathlib import Path

from step23_table import build_all, build_key, tile_of, timed_shapes  # studies/, the script's folder

from autotune.peers import SIZE_RANGE, category, seeded_shapes
from autotune.records import shipped_rows, suites
from autotune.space import FEW_TILE, PIPELINE, SKINNY, SKINNY_TILE, infeasibility
from kernels.base import Config, DeviceLimits

SM_COUNT = 132
#: more tiles for skinny shapes, before fitting: the long side at 64, 128 and 256, BK 16 and 32
SKINNY_VARIANTS = [
    {"bm": 128, "bn": 128, "bk": 16, "tm": 8, "tn": 8},
    {"bm": 64, "bn": 64, "bk": 32, "tm": 4, "tn": 4},
    {"bm": 256, "bn": 256, "bk": 16, "tm": 8, "tn": 8},
    {"bm": 128, "bn": 128, "bk": 32, "tm": 4, "tn": 4},
]


def skinny_shapes(seed: int, count: int) -> list[tuple[int, int, int]]:
    """`count` skinny shapes: the short side log-uniform in 1..SKINNY, the others in SIZE_RANGE,
    the short side M or N by turns."""
    rng = random.Random(seed)
    low, high = SIZE_RANGE
    shapes = []
    while len(shapes) < count:
        short = round(SKINNY ** rng.random())
        long_side, k = (round(low * (high / low) ** rng.random()) for _ in range(2))
        shape = (short, long_side, k) if len(shapes) % 2 == 0 else (long_side, short, k)
        if shape not in shapes:
            shapes.append(shape)
    return shapes


def candidate_tiles() -> tuple[list[dict], int]:
    """The candidate tiles (the shipped records', then the rule's, then SKINNY_VARIANTS) and how
    many of them, from the start, every shape tries."""
    tiles = []
    for row in shipped_rows(None, "float32"):
        if (row.get("layout") or "NN") == "NN" and row["family"] in ("vector", "splitk"):
            tile = tile_of(row["params"])
            if tile not in tiles:
                tiles.append(tile)
    for extra in (SKINNY_TILE, FEW_TILE):
        tile = _with_pipeline(extra)
        if tile not in tiles:
            tiles.append(tile)
    everywhere = len(tiles)
    return tiles + [_with_pipeline(v) for v in SKINNY_VARIANTS], everywhere


def _with_pipeline(tile: dict) -> dict:
    """`tile` with the rule's 4-stage pipeline."""
    return {**PIPELINE, **tile}


def training_jobs(shapes: list[tuple], tiles: list[dict], everywhere: int) -> list[dict]:
    from autotune.backends import Device
    from autotune.neighbours import POLICIES, candidate_name, config_for
    from autotune.runtime import lookup

    limits = DeviceLimits.for_cc("9.0")
    device = Device("NVIDIA H200", "9.0", SM_COUNT)
    jobs = []
    for shape in shapes:
        found: dict[str, dict] = {}
        tried = len(tiles) if min(shape[:2]) <= SKINNY else everywhere
        for index, tile in enumerate(tiles[:tried]):
            for policy in POLICIES:
                family, params = config_for(tile, policy, *shape, SM_COUNT)
                if infeasibility(family, params, "float32", limits) is not None:
                    continue  # lookup passes it over too
                key = Config.of(family, params).key
                found.setdefault(key, {"family": family, "params": params, "dtype": "float32", "shape": list(shape),
                                       "candidates": []})
                found[key]["candidates"].append(candidate_name(index, policy))
        choice = lookup(*shape, "float32", device)
        key = Config.of(choice.family, choice.config).key
        found.setdefault(key, {"family": choice.family, "params": choice.config, "dtype": "float32",
                               "shape": list(shape), "candidates": []})
        found[key]["lookup"] = choice.source
        jobs += found.values()
    return jobs


def ship(out: str, parts: list[str]) -> None:
    from autotune.neighbours import dumps, leave_one_out, table_of

    opener = {".gz": gzip.open, ".xz": lzma.open}
    found = [json.loads(opener.get(Path(path).suffix, open)(path, "rt").read()) for path in parts]
    if any(part["tiles"] != found[0]["tiles"] or part["kernels"] != found[0]["kernels"] for part in found):
        raise SystemExit("the parts were measured with other candidates or other kernel code")
    table = table_of({**found[0], "shapes": [shape for part in found for shape in part["shapes"]]}, "9.0", SM_COUNT)
    Path(out).write_text(dumps(table))
    rows = leave_one_out(table, SM_COUNT)
    mean = {key: math.exp(sum(math.log(r[key]) for r in rows) / len(rows)) for key in ("of_best", "vs_cublas")}
    oracle = math.exp(sum(math.log(max(s["gflops"].values()) / s["cublas_gflops"]) for s in table["shapes"])
                      / len(table["shapes"]))
    print(f"{len(table['shapes'])} shapes, {len(table['tiles'])} tiles; best candidate {oracle:.3f}x cuBLAS; "
          f"leave-one-out pick {mean['of_best']:.3f} of the best, {mean['vs_cublas']:.3f}x cuBLAS")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ship", nargs="+", metavar=("OUT", "PART"), help="write the shipped table from parts")
    parser.add_argument("--out")
    parser.add_argument("--seeds", type=int, nargs="*", default=[])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--shapes", nargs="*", default=[], help="more training shapes, like 1000x1000x1000")
    parser.add_argument("--skinny", type=int, default=7)
    parser.add_argument("--skinny-count", type=int, default=0)
    parser.add_argument("--part", default="0/1")
    parser.add_argument("--store")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=1e9, help="stop timing new shapes after this long")
    parser.add_argument("--dry", action="store_true", help="count the jobs and builds, then stop")
    args = parser.parse_args()
    if args.ship:
        return ship(args.ship[0], args.ship[1:])
    began = time.perf_counter()
    held_out = {tuple(map(int, s.split("x"))) for listed in suites().values() for s in listed}
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes]
    shapes += [s for seed in args.seeds for s in seeded_shapes(seed, args.count)]
    shapes += skinny_shapes(args.skinny, args.skinny_count)
    shapes = [s for s in dict.fromkeys(shapes) if s not in held_out]
    part, parts = map(int, args.part.split("/"))
    shapes = shapes[part::parts]
    tiles, everywhere = candidate_tiles()
    jobs = training_jobs(shapes, tiles, everywhere)
    print(f"{len(shapes)} shapes, {len(tiles)} tiles, {len(jobs)} jobs, {len({build_key(j) for j in jobs})} builds",
          flush=True)
    if args.dry:
        return
    root = Path(args.store or tempfile.mkdtemp(prefix="mmtune-table-"))
    failed = build_all(jobs, root, args.jobs)

    from autotune.peers import TorchDevice
    from kernels import source_hashes

    device = TorchDevice()
    result = {"device": device.name, "kernels": source_hashes(), "tiles": tiles, "shapes": []}
    for (shape, _), group, blas_gflops, seconds, _ in timed_shapes(device, jobs, root, failed, began + args.seconds):
        done = [j for j in group if j.get("gflops")]
        best = max(done, key=lambda j: j["gflops"]) if done else None
        picked = [j for j in group if j.get("lookup")]
        result["shapes"].append({"shape": list(shape), "category": category(*shape), "cublas_gflops": blas_gflops,
                                 "jobs": group})
        blas_gflops = blas_gflops or math.nan
        pick = picked[0].get("gflops") if picked else None
        print(f"{'x'.join(map(str, shape)):>16} {category(*shape) or '-':>6} cuBLAS {blas_gflops:8.0f}"
              f"  best {best['gflops'] / blas_gflops if best else 0:5.3f} ({','.join(best['candidates'][:3]) if best else '-'})"
              f"  pick {pick / blas_gflops if pick else 0:5.3f}  {len(done)}/{len(group)} ran"
              f"  {seconds:4.1f} s", flush=True)
        Path(args.out).write_text(json.dumps(result, indent=0))
    print(f"done in {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
