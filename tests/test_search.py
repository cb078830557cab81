"""How fast the tuner gets near the best, replaying an exhaustive GPU sweep (no GPU needed).

studies/h200/vector_exhaustive_4096.json holds every feasible float32 `vector` config at 4096^3
on an H200 (studies/exhaustive.py), swept before the family had `unroll`, `fragments`,
`wide_fetch`, `async_copy` and `min_blocks`, had 1 or 2 stages, and allowed 128 elements per
thread. The tuner searches exactly that space (those parameters pinned to what the sweep ran: a
rolled loop, one fragment set, scalar fetches through registers, no min-blocks bound) with the
measurements replayed, and must reach 0.97 of the sweep's best within 40 trials.
"""

import json
import statistics
from pathlib import Path

import pytest
from replay import Replay, config_key

import kernels
from autotune.cache import Cache
from autotune.tuner import tune

SWEEP = json.loads((Path(__file__).parent.parent / "studies/h200/vector_exhaustive_4096.json").read_text())
AS_SWEPT = {"unroll": False, "fragments": 1, "wide_fetch": False, "async_copy": False, "min_blocks": 1}
SWEPT_DEFAULT = {"bm": 128, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "pad": 4, "stages": 2}  # the warm start's
TABLE = {config_key(r["family"], {**r["config"], **AS_SWEPT}): r["gflops"] for r in SWEEP["rows"] if "gflops" in r}
BEST = max(TABLE.values())
SEEDS = range(5)


@pytest.fixture(autouse=True)
def swept_space(monkeypatch):
    """The vector family's space as it was when the sweep ran."""
    pinned = {name: [value] for name, value in AS_SWEPT.items()}
    monkeypatch.setattr(kernels.vector, "SPACE", {**kernels.vector.SPACE, **pinned, "stages": [1, 2]})
    monkeypatch.setattr(kernels.vector, "DEFAULT", {**SWEPT_DEFAULT, **AS_SWEPT})
    monkeypatch.setattr(kernels.tiles, "MAX_ELEMENTS_PER_THREAD", 64)


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
