"""How fast the tuner gets near the best, replaying exhaustive GPU sweeps (no GPU needed).

studies/h200/exhaustive4096/rows.jsonl.xz holds every feasible float32 `vector` config of the
space of step 18 (FULL_SPACE) at 4096^3 on an H200 (studies/exhaustive.py; 22,910 configs, a few measured twice by
overlapping runs: their median counts). The tuner searches that space with the measurements
replayed and must reach 0.97 of the sweep's best within 40 trials.

studies/h200/vector_exhaustive_4096.json is the older sweep, of the space before the family had
`unroll`, `fragments`, `wide_fetch`, `async_copy` and `min_blocks`, had 1 or 2 stages, and
allowed 128 elements per thread (vector_exhaustive_4096.space.json beside it). The tuner searches
exactly that space (those parameters pinned to what the sweep ran) and must reach 0.97 of its
best within 40 trials too.
"""

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

import kernels
from autotune.store.cache import Cache
from autotune.tune.replay import Replay, best_found, config_key, median_table, read_rows
from autotune.space.configs import DeviceLimits, feasible_configs
from autotune.tune.tuner import TuneRequest, tune

STUDIES = Path(__file__).parent.parent / "studies/h200"
SEEDS = range(5)
#: the seeds the default run tries; the others run with `-m long`
PER_SEED = [seed if seed == 0 else pytest.param(seed, marks=pytest.mark.long) for seed in SEEDS]


def best_within(table: dict, trials: int, seed: int, sampler: str = "climb") -> float:
    return best_found(table, TuneRequest(4096, 4096, 4096, trials=trials, families=["vector"], sampler=sampler, seed=seed))


def mean_found(table: dict, trials: int, tmp_path, monkeypatch) -> dict:
    """Each sampler's best within `trials`, as a fraction of the table's best, averaged over SEEDS."""
    found = {}
    for sampler in ("climb", "tpe", "random"):
        runs = []
        for seed in SEEDS:
            monkeypatch.setenv("MMTUNE_CACHE", str(tmp_path / sampler / f"{seed}" / "cache.db"))
            runs.append(best_within(table, trials, seed, sampler) / max(table.values()))
        found[sampler] = statistics.mean(runs)
    return found


FULL_ROWS = read_rows(STUDIES / "exhaustive4096/rows.jsonl.xz")
FULL = median_table(FULL_ROWS)
#: what the vector family's space was when the full sweep ran (step 18), before 16-wide tiles and
#: 5 and 6 stages joined it
FULL_SPACE = {"bm": [32, 64, 128, 256], "bn": [32, 64, 128, 256], "stages": [1, 2, 3, 4]}


@pytest.fixture
def full_space(monkeypatch):
    vector = kernels.family("vector")
    monkeypatch.setitem(kernels.FAMILIES, "vector", dataclasses.replace(vector, space={**vector.space, **FULL_SPACE}))


def test_the_full_sweep_timed_every_feasible_config(full_space):
    feasible = {config_key("vector", c) for c in feasible_configs("vector", "float32", DeviceLimits())}
    assert all(row["verified"] for row in FULL_ROWS)
    assert set(FULL) == feasible and len(feasible) == 22910


@pytest.mark.parametrize("seed", PER_SEED)
def test_tune_reaches_97_percent_of_the_full_sweep_best_within_40_trials(seed, full_space, tmp_path, monkeypatch):
    monkeypatch.setenv("MMTUNE_CACHE", str(tmp_path / f"{seed}" / "cache.db"))
    result = tune(TuneRequest(4096, 4096, 4096, trials=40, families=["vector"], seed=seed, jobs=1),
                  Replay(FULL, default=0.0), show_progress=False)
    assert result.trials == 40
    assert result.row.gflops >= 0.97 * max(FULL.values())


@pytest.mark.long
def test_climb_beats_tpe_and_random_search_on_the_full_sweep(full_space, tmp_path, monkeypatch):
    found = mean_found(FULL, 20, tmp_path, monkeypatch)
    assert found["climb"] > found["tpe"] and found["climb"] > found["random"], found


SWEEP = json.loads((STUDIES / "vector_exhaustive_4096.json").read_text())
SWEPT_SPACE = json.loads((STUDIES / "vector_exhaustive_4096.space.json").read_text())
AS_SWEPT = SWEPT_SPACE["pinned"]
TABLE = {config_key(r["family"], {**r["config"], **AS_SWEPT}): r["gflops"] for r in SWEEP["rows"] if "gflops" in r}
BEST = max(TABLE.values())


@pytest.fixture
def swept_space(monkeypatch):
    """The vector family's space as it was when the sweep ran."""
    pinned = {name: [value] for name, value in AS_SWEPT.items()}
    vector = kernels.family("vector")
    monkeypatch.setitem(kernels.FAMILIES, "vector", dataclasses.replace(
        vector, space={**vector.space, **pinned, "stages": SWEPT_SPACE["stages"]},
        default={**SWEPT_SPACE["default"], **AS_SWEPT}))
    monkeypatch.setattr(kernels.tiles, "MAX_ELEMENTS_PER_THREAD", SWEPT_SPACE["max_elements_per_thread"])


def test_the_old_sweep_is_complete():
    assert SWEEP["configs"] == SWEEP["timed"] == len(TABLE) == 806


@pytest.mark.parametrize("sampler", ["climb", "tpe"])
@pytest.mark.parametrize("seed", PER_SEED)
def test_the_old_space_reaches_97_percent_of_its_best_within_40_trials(sampler, seed, swept_space, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("MMTUNE_CACHE", str(tmp_path / f"{seed}" / "cache.db"))
    assert best_within(TABLE, 40, seed, sampler) >= 0.97 * BEST


@pytest.mark.long
def test_tpe_and_climb_beat_random_search_on_the_old_space(swept_space, tmp_path, monkeypatch):
    found = mean_found(TABLE, 20, tmp_path, monkeypatch)
    assert min(found["climb"], found["tpe"]) > found["random"], found
    assert Cache().rows()  # the winner was cached
