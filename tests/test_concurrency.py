"""Many processes on one cache and one study journal: no "database is locked", no row lost, the
fastest row kept per key, every trial recorded once."""

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna

from autotune.store.cache import Cache
from autotune.tune.storage import open_storage
from autotune.tune.study import study_name
from autotune.space.problem import Problem

TESTS = str(Path(__file__).parent)
KEYS = [(64, 64, 64), (128, 64, 64), (64, 128, 32)]

RECORDER = """
import random, sys
from autotune.store.cache import Cache
from autotune.store.rows import Row
worker, keys = int(sys.argv[1]), eval(sys.argv[2])
rng = random.Random(worker)
cache = Cache()
for i in range(60):
    m, n, k = keys[i % len(keys)]
    cache.record(Row(device="GPU", dtype="float32", m=m, n=n, k=k, family="shared",
                      params={"tpb": 16, "pad": worker % 3}, gflops=rng.uniform(1, 1000)))
"""

TUNER = """
import sys
sys.path.insert(0, sys.argv[4])
from autotune.tune.replay import Replay, config_key
from autotune.space.configs import feasible_configs, DeviceLimits
from autotune.tune.tuner import TuneRequest, tune
table = {config_key("shared", c): 10.0 * c["tpb"] + c["pad"] for c in feasible_configs("shared", "float32", DeviceLimits())}
m, n, k = (int(x) for x in sys.argv[1:4])
tune(TuneRequest(m, n, k, trials=5, families=["shared"], sampler="random", seed=int(sys.argv[5]), jobs=1), Replay(table),
     show_progress=False)
"""

OPENER = """
import sys
from pathlib import Path
from autotune.store.cache import Cache
from autotune.space.configs import DeviceLimits
from autotune.tune.storage import open_storage
from autotune.tune.study import open_study
from autotune.backends import Device
from autotune.space.problem import Problem
from autotune.tune.study import WarmStart
spec, worker, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
cache = Cache()
storage = open_storage(spec)
arrived = Path(spec).parent / "arrived"
arrived.mkdir(exist_ok=True)
(arrived / worker).touch()
while len(list(arrived.iterdir())) < workers:  # all openers call Optuna at the same moment
    pass
start = WarmStart(problem=Problem("simulator", "float32", 8, 8, 8), gpu=Device("simulator", "", 0),
                  families=["shared", "vector"], limits=DeviceLimits())
open_study(storage, spec, "race", None, cache, start)
"""


def spawn(script, *args):
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], env=os.environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(processes):
    for p in processes:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        assert "database is locked" not in err


def test_eight_writers_keep_the_fastest_row_of_every_key(isolated_cache):
    finish([spawn(RECORDER, worker, repr(KEYS)) for worker in range(8)])
    expected = {}
    import random

    for worker in range(8):
        rng = random.Random(worker)
        for i in range(60):
            key = KEYS[i % len(KEYS)]
            expected[key] = max(expected.get(key, 0), rng.uniform(1, 1000))
    rows = {r.shape: r.gflops for r in Cache().rows()}
    assert rows == expected
    assert sqlite3.connect(isolated_cache).execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_eight_tuners_on_shared_and_separate_shapes(isolated_cache):
    shapes = [(8, 8, 8)] * 4 + [(9, 8, 8), (8, 9, 8), (8, 8, 9), (7, 7, 7)]
    finish([spawn(TUNER, *shape, TESTS, seed) for seed, shape in enumerate(shapes)])
    rows = {r.shape: r for r in Cache().rows()}
    assert set(rows) == set(shapes)
    storage = open_storage(str(isolated_cache.parent / "studies.journal"))
    for shape in set(shapes):
        study = optuna.load_study(study_name=study_name(Problem("simulator", "float32", *shape, precision="ieee"), narrowed=True), storage=storage)
        numbers = [t.number for t in study.trials]
        assert len(numbers) == len(set(numbers)) and all(t.state.is_finished() for t in study.trials)
        best = max(t.value for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE)
        assert rows[shape].gflops == best
    shared = optuna.load_study(study_name=study_name(Problem("simulator", "float32", 8, 8, 8, precision="ieee"), narrowed=True), storage=storage)
    assert len(shared.trials) >= 5  # four tuners resumed one study
    assert sqlite3.connect(isolated_cache).execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_tuners_starting_together_queue_each_warm_start_config_once(isolated_cache):
    spec = str(isolated_cache.parent / "studies.journal")
    finish([spawn(OPENER, spec, worker, 8) for worker in range(8)])
    study = optuna.load_study(study_name="race", storage=open_storage(spec))
    queued = [repr(t.system_attrs["fixed_params"]) for t in study.trials]
    assert len(queued) == 2 and len(set(queued)) == 2  # the shared and vector defaults, once each
