"""How fast the tuner gets near the best, replaying an exhaustive GPU sweep (no GPU needed).

studies/h200/vector_exhaustive_4096.json holds every feasible float32 `vector` config at 4096^3
on an H200 (studies/exhaustive.py). The tuner, searching that family with the measurements
replayed, must reach 0.97 of the sweep's best within 40 trials.
"""

import json
import statistics
from pathlib import Path

import pytest
from replay import Replay, config_key

from autotune.cache import Cache
from autotune.tuner import tune

SWEEP = json.loads((Path(__file__).parent.parent / "studies/h200/vector_exhaustive_4096.json").read_text())
TABLE = {config_key(r["family"], r["config"]): r["gflops"] for r in SWEEP["rows"] if "gflops" in r}
BEST = max(TABLE.values())
SEEDS = range(5)


def best_within(trials: int, seed: int, sampler: str = "tpe") -> float:
    result = tune(4096, 4096, 4096, trials=trials, families=["vector"], sampler=sampler, seed=seed,
                  show_progress=False, measurer=Replay(TABLE, default=0.0))
    return result.row["gflops"]


def test_the_sweep_is_complete():
    assert SWEEP["configs"] == SWEEP["timed"] == len(TABLE) == 806


@pytest.mark.parametrize("seed", SEEDS)
def test_tpe_reaches_97_percent_of_the_exhaustive_best_within_40_trials(seed, tmp_path, monkeypatch):
    monkeypatch.setenv("MMTUNE_CACHE", str(tmp_path / f"{seed}" / "cache.db"))
    assert best_within(40, seed) >= 0.97 * BEST


def test_tpe_beats_random_search(tmp_path, monkeypatch):
    found = {}
    for sampler in ("tpe", "random"):
        runs = []
        for seed in SEEDS:
            monkeypatch.setenv("MMTUNE_CACHE", str(tmp_path / sampler / f"{seed}" / "cache.db"))
            runs.append(best_within(20, seed, sampler) / BEST)
        found[sampler] = statistics.mean(runs)
    assert found["tpe"] > found["random"], found
    assert Cache().rows()  # the winner was cached
