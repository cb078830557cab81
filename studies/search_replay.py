"""How often each sampler reaches 0.97 of an exhaustive sweep's best, replaying the sweep
through `autotune.tuner.tune` (no GPU): the table of docs/performance.md step 17.

    python studies/search_replay.py [--trials 40] [--seeds 20] [--sampler climb --sampler tpe ...]

Rows: the 4096^3 sweep of today's `vector` space from the family's default and from the default
before step 17 (scalar global fetches), and the older 806-config sweep (its space pinned as
tests/test_search.py pins it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # the replay needs no GPU
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

import kernels  # noqa: E402
import test_search  # noqa: E402


def found(table: dict, sampler: str, trials: int, seeds: int) -> list[float]:
    best = max(table.values())
    runs = []
    for seed in range(seeds):
        os.environ["MMTUNE_CACHE"] = str(Path(tempfile.mkdtemp()) / "cache.db")
        runs.append(test_search.best_within(table, trials, seed, sampler) / best)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--sampler", action="append", help="default: climb, tpe, random")
    args = parser.parse_args()
    today = dict(kernels.vector.DEFAULT)
    space, limit = dict(kernels.vector.SPACE), kernels.tiles.MAX_ELEMENTS_PER_THREAD
    old_space = {**space, **{name: [value] for name, value in test_search.AS_SWEPT.items()}, "stages": [1, 2]}
    setups = [
        ("full sweep, default", test_search.FULL, today, space, limit),
        ("full sweep, old default", test_search.FULL, {**today, "wide_fetch": False}, space, limit),
        ("806-config sweep", test_search.TABLE, {**test_search.SWEPT_DEFAULT, **test_search.AS_SWEPT}, old_space, 64),
    ]
    print(f"{args.trials} trials, seeds 0-{args.seeds - 1}: best found / sweep best")
    print(f"{'table':26} {'sampler':8} {'mean':>6} {'worst':>6} {'>=0.97':>7}")
    for label, table, default, searched, max_elements in setups:
        kernels.vector.DEFAULT, kernels.vector.SPACE, kernels.tiles.MAX_ELEMENTS_PER_THREAD = default, searched, max_elements
        for sampler in args.sampler or ["climb", "tpe", "random"]:
            runs = found(table, sampler, args.trials, args.seeds)
            reached = sum(r >= 0.97 for r in runs)
            print(f"{label:26} {sampler:8} {statistics.mean(runs):6.3f} {min(runs):6.3f} {reached:>4}/{len(runs)}", flush=True)


if __name__ == "__main__":
    main()
