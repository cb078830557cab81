"""How fast the tuner gets near the best, replaying exhaustive GPU sweeps (no GPU needed).

studies/h200/exhaustive4096/rows.jsonl.xz holds every feasible float32 `vector` config of the
space of step 18 (FULL_SPACE) at 4096^3 on an H200 (studies/exhaustive.py; 22,910 configs, a few measured twice by
overlapping runs: their median counts). The tuner searches that space with the measurements
replayed and must reach 0.97 of the sweep's best within 40 trials.

studies/h200/vector_exhaustive_4096.json.xz is the older sweep, of the space before the family had
`unroll`, `fragments`, `wide_fetch`, `async_copy` and `min_blocks`, had 1 or 2 stages, and
allowed 128 elements per thread (vector_exhaustive_4096.space.json beside it). The tuner searches
exactly that space (those parameters pinned to what the sweep ran) and must reach 0.97 of its
best within 40 trials too.
"""

import dataclasses
import json
import lzma
import statistics
from pathlib import Path

import pytest

import kernels
from autotune.space.configs import DeviceLimits, feasible_configs
from autotune.store.cache import Cache
from autotune.tune.replay import Replay, best_found, config_key, median_table, read_rows
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


@pytest.fixture(scope="module")
def full_rows() -> list[dict]:
    return read_rows(STUDIES / "exhaustive4096/rows.jsonl.xz")


@pytest.fixture(scope="module")
def full_table(full_rows) -> dict:
    return median_table(full_rows)


#: what the vector family's space was when the full sweep ran (step 18), before 16-wide tiles and
#: 5 and 6 stages joined it
FULL_SPACE = {"bm": [32, 64, 128, 256], "bn": [32, 64, 128, 256], "stages": [1, 2, 3, 4]}


@pytest.fixture
def full_space(monkeypatch):
    vector = kernels.family("vector")
    monkeypatch.setitem(kernels.FAMILIES, "vector", dataclasses.replace(vector, space={**vector.space, **FULL_SPACE}))


def test_the_full_sweep_timed_every_feasible_config(full_space, full_rows, full_table):
    feasible = {config_key("vector", c) for c in feasible_configs("vector", "float32", DeviceLimits())}
    assert all(row["verified"] for row in full_rows)
    assert set(full_table) == feasible and len(feasible) == 22910


@pytest.mark.parametrize("seed", PER_SEED)
def test_tune_reaches_97_percent_of_the_full_sweep_best_within_40_trials(seed, full_space, full_table, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("MMTUNE_CACHE", str(tmp_path / f"{seed}" / "cache.db"))
    result = tune(TuneRequest(4096, 4096, 4096, trials=40, families=["vector"], seed=seed, jobs=1),
                  Replay(full_table, default=0.0), show_progress=False)
    assert result.trials == 40
    assert result.row.gflops >= 0.97 * max(full_table.values())


@pytest.mark.long
def test_climb_beats_tpe_and_random_search_on_the_full_sweep(full_space, full_table, tmp_path, monkeypatch):
    found = mean_found(full_table, 20, tmp_path, monkeypatch)
    assert found["climb"] > found["tpe"] and found["climb"] > found["random"], found


@dataclasses.dataclass(frozen=True)
class OldSweep:
    report: dict
    space: dict
    table: dict


@pytest.fixture(scope="module")
def old_sweep() -> OldSweep:
    with lzma.open(STUDIES / "vector_exhaustive_4096.json.xz", "rt") as swept:
        report = json.load(swept)
    space = json.loads((STUDIES / "vector_exhaustive_4096.space.json").read_text())
    table = {config_key(r["family"], {**r["config"], **space["pinned"]}): r["gflops"]
             for r in report["rows"] if "gflops" in r}
    return OldSweep(report, space, table)


@pytest.fixture
def swept_space(monkeypatch, old_sweep):
    """The vector family's space as it was when the sweep ran."""
    pinned = {name: [value] for name, value in old_sweep.space["pinned"].items()}
    vector = kernels.family("vector")
    monkeypatch.setitem(kernels.FAMILIES, "vector", dataclasses.replace(
        vector, space={**vector.space, **pinned, "stages": old_sweep.space["stages"]},
        default={**old_sweep.space["default"], **old_sweep.space["pinned"]}))
    monkeypatch.setattr(kernels.tiles, "MAX_ELEMENTS_PER_THREAD", old_sweep.space["max_elements_per_thread"])


def test_the_old_sweep_is_complete(old_sweep):
    assert old_sweep.report["configs"] == old_sweep.report["timed"] == len(old_sweep.table) == 806


@pytest.mark.parametrize("sampler", ["climb", "tpe"])
@pytest.mark.parametrize("seed", PER_SEED)
def test_the_old_space_reaches_97_percent_of_its_best_within_40_trials(sampler, seed, swept_space, old_sweep,
                                                                      tmp_path, monkeypatch):
    monkeypatch.setenv("MMTUNE_CACHE", str(tmp_path / f"{seed}" / "cache.db"))
    assert best_within(old_sweep.table, 40, seed, sampler) >= 0.97 * max(old_sweep.table.values())


@pytest.mark.long
def test_tpe_and_climb_beat_random_search_on_the_old_space(swept_space, old_sweep, tmp_path, monkeypatch):
    found = mean_found(old_sweep.table, 20, tmp_path, monkeypatch)
    assert min(found["climb"], found["tpe"]) > found["random"], found
    assert Cache().rows()  # the winner was cached
