"""How often each sampler reaches 0.97 of an exhaustive sweep's best, replaying the sweep
through `autotune.tune.tuner.tune` (no GPU): the table of docs/performance.md step 17.

    python studies/search_replay.py [--trials 40] [--seeds 20] [--sampler climb --sampler tpe ...]

Rows: the 4096^3 sweep of today's `vector` space from the family's default and from the default
before step 17 (scalar global fetches), and the older 806-config sweep (its space as
h200/vector_exhaustive_4096.space.json describes it, as tests/test_search.py searches it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import lzma
import os
import statistics
import tempfile
from pathlib import Path

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # the replay needs no GPU

import kernels
from autotune.tune.replay import best_found, config_key, median_table, read_rows
from autotune.tune.tuner import TuneRequest

H200 = Path(__file__).parent / "h200"
SHAPE = (4096, 4096, 4096)


def found(table: dict, sampler: str, trials: int, seeds: int) -> list[float]:
    best = max(table.values())
    runs = []
    for seed in range(seeds):
        cache = Path(tempfile.mkdtemp()) / "cache.db"
        runs.append(best_found(table, TuneRequest(*SHAPE, trials=trials, families=["vector"], sampler=sampler, seed=seed),
                               cache_path=cache) / best)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--sampler", action="append", help="default: climb, tpe, random")
    args = parser.parse_args()
    full = median_table(read_rows(H200 / "exhaustive4096/rows.jsonl.xz"))
    old = json.loads((H200 / "vector_exhaustive_4096.space.json").read_text())
    pinned = old["pinned"]
    with lzma.open(H200 / "vector_exhaustive_4096.json.xz", "rt") as file:
        swept = json.load(file)["rows"]
    old_table = {config_key(r["family"], {**r["config"], **pinned}): r["gflops"] for r in swept if "gflops" in r}
    vector = kernels.family("vector")
    today = dict(vector.default)
    space, limit = dict(vector.space), kernels.tiles.MAX_ELEMENTS_PER_THREAD
    old_space = {**space, **{name: [value] for name, value in pinned.items()}, "stages": old["stages"]}
    setups = [
        ("full sweep, default", full, today, space, limit),
        ("full sweep, old default", full, {**today, "wide_fetch": False}, space, limit),
        ("806-config sweep", old_table, {**old["default"], **pinned}, old_space, old["max_elements_per_thread"]),
    ]
    print(f"{args.trials} trials, seeds 0-{args.seeds - 1}: best found / sweep best")
    print(f"{'table':26} {'sampler':8} {'mean':>6} {'worst':>6} {'>=0.97':>7}")
    for label, table, default, searched, max_elements in setups:
        kernels.FAMILIES["vector"] = dataclasses.replace(vector, default=default, space=searched)
        kernels.tiles.MAX_ELEMENTS_PER_THREAD = max_elements
        for sampler in args.sampler or ["climb", "tpe", "random"]:
            runs = found(table, sampler, args.trials, args.seeds)
            reached = sum(r >= 0.97 for r in runs)
            print(f"{label:26} {sampler:8} {statistics.mean(runs):6.3f} {min(runs):6.3f} {reached:>4}/{len(runs)}", flush=True)


if __name__ == "__main__":
    main()
