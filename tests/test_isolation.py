import os

import numpy as np
import optuna
import pytest
from faults import CRASH, HANG, POISON, faulty_measure

import kernels
from autotune.store.cache import Cache
from autotune.measure.isolation import Isolated, MeasureFailed
from autotune.tune.tuner import TuneRequest, tune
from autotune.space.problem import Problem


def kernel(config):
    return kernels.build("shared", config, "float32")


@pytest.fixture
def isolated():
    measurer = Isolated(faulty_measure, timeout_s=3)
    yield measurer
    measurer.close()


def test_a_good_config_is_measured_in_the_child(isolated):
    result = isolated(kernel({"tpb": 16, "pad": 1}), (4, 4, 4), np.random.default_rng(0))
    assert result.gflops == 17.0 and isolated._process.pid != os.getpid()


@pytest.mark.parametrize(
    "config,message",
    [
        (CRASH, "the measuring process died \\(exit code 3\\)"),
        (HANG, "no result within 3 s: the measuring process was killed"),
        (POISON, "RuntimeError: \\[700\\] Call to cuLaunchKernel results in CUDA_ERROR_ILLEGAL_ADDRESS"),
    ],
)
def test_a_fault_fails_the_call_and_the_next_gets_a_fresh_child(isolated, config, message):
    isolated(kernel({"tpb": 16, "pad": 0}), (4, 4, 4), np.random.default_rng(0))
    first = isolated._process.pid
    with pytest.raises(MeasureFailed, match=message):
        isolated(kernel(config), (4, 4, 4), np.random.default_rng(0))
    assert isolated(kernel({"tpb": 32, "pad": 0}), (4, 4, 4), np.random.default_rng(0)).gflops == 32.0
    assert isolated._process.pid != first


def test_the_study_survives_crashing_hanging_and_poisoning_kernels():
    measurer = Isolated(faulty_measure, timeout_s=3)
    try:
        result = tune(TuneRequest(6, 5, 4, trials=9, families=["shared"], sampler="grid", jobs=1), measurer,
                      show_progress=False)
    finally:
        measurer.close()  # the caller's to close
    from autotune.tune.storage import open_storage

    study = optuna.load_study(study_name=result.study_name, storage=open_storage(result.storage))
    failed = {t.params["shared.pad"]: t.user_attrs["error"] for t in study.trials
              if t.state == optuna.trial.TrialState.FAIL and t.params["shared.tpb"] == 0}
    assert result.trials == 9 and result.failed == 3 and len(failed) == 3
    assert "died (exit code 3)" in failed[0] and "no result within 3 s" in failed[1]
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in failed[2]
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == 6
    row = Cache().get(Problem("simulator", "float32", 6, 5, 4))
    assert (row.params, row.gflops) == ({"tpb": 32, "pad": 2}, 34.0)


def test_worker_processes_measure_in_children_of_their_own_across_tunes(monkeypatch):
    """--jobs 2 as `tune --recorded` runs it: kept workers, each with its isolated measuring child."""
    import autotune.tune.tuner
    from autotune.tune.storage import open_storage
    from autotune.tune.workers import Workers
    from optuna.trial import TrialState

    monkeypatch.setattr(autotune.tune.tuner, "available_memory", lambda: 64 * 2**30)
    measurer = Isolated(faulty_measure, timeout_s=5)
    try:
        with Workers([None, None], Cache().path.parent) as workers:
            for shape in ((6, 5, 4), (7, 5, 3)):
                result = tune(TuneRequest(*shape, trials=4, families=["shared"], sampler="grid", jobs=2), measurer,
                              show_progress=False, workers=workers)
                study = optuna.load_study(study_name=result.study_name, storage=open_storage(result.storage))
                errors = [t.user_attrs.get("error", "") for t in study.trials if t.state == TrialState.FAIL]
                planted = ("died (exit code 3)", "no result within 5 s", "CUDA_ERROR_ILLEGAL_ADDRESS")
                assert result.row is not None and all(any(p in e for p in planted) for e in errors), errors
    finally:
        measurer.close()
