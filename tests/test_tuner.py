import importlib.util

import optuna
import pytest

import kernels
from autotune.cache import Cache
from autotune.replay import Replay, config_key
from autotune.space import FAMILY_NAMES
from autotune.tuner import FINALISTS, FIRST_GUESSES, TuneError, study_name, tune

SHAPE = (96, 80, 64)
REG = kernels.register.DEFAULT
FAST = {**REG, "bm": 32, "bn": 32, "tm": 2, "tn": 2}


def run(replay, trials=8, **options):
    options.setdefault("families", ["register"])
    return tune(*SHAPE, trials=trials, show_progress=False, measurer=replay, **options)


def load(result):
    return optuna.load_study(study_name=result.study_name, storage=_journal())


def _journal():
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(str(Cache().path.parent / "studies.journal")))


def test_tune_writes_the_best_verified_config_to_the_cache():
    replay = Replay({config_key("register", FAST): 500.0}, default=10.0)
    result = run(replay, trials=6)
    assert result.written and result.trials == 6 and result.new_trials == 6
    row = Cache().get("simulator", "float32", *SHAPE)
    assert row == {**row, "family": "register", "params": REG, "gflops": 10.0, "trials": 6}
    assert row["study"] == study_name("simulator", "float32", *SHAPE) and row["source_hash"]


def test_the_default_is_the_first_trial_and_finalists_are_retimed():
    replay = Replay(default=10.0)
    run(replay, trials=5)
    assert replay.calls[0] == config_key("register", REG)
    assert len(replay.calls) == 5 + min(FINALISTS, len(set(replay.calls)))


def test_failures_are_failed_trials_with_reasons_and_never_cached():
    replay = Replay({config_key("register", REG): 1e6}, crash=[config_key("register", REG)], default=5.0)
    result = run(replay, trials=6)
    study = load(result)
    failed = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert result.failed == len(failed) >= 1
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in failed[0].user_attrs["error"]
    assert Cache().get("simulator", "float32", *SHAPE)["gflops"] == 5.0


def test_wrong_results_fail_their_trial():
    replay = Replay(wrong=[config_key("register", REG)])
    study = load(run(replay, trials=3))
    assert study.trials[0].state == optuna.trial.TrialState.FAIL
    assert study.trials[0].user_attrs["error"].startswith("wrong result: relative error 0.5")


class Everything:
    def __contains__(self, item):
        return True


def test_nothing_verified_means_nothing_cached():
    result = run(Replay(wrong=Everything()), trials=3)
    assert result.row is None and not result.written and Cache().rows() == []


def test_a_rerun_resumes_the_study():
    first = run(Replay(), trials=4)
    second = run(Replay(), trials=7)
    assert (second.trials, second.new_trials) == (7, 3)
    third = run(Replay(), trials=7)
    assert third.new_trials == 0 and third.study_name == first.study_name
    assert len([t for t in load(third).trials if t.state.is_finished()]) >= 7


def test_resuming_with_other_families_is_refused_before_any_trial():
    run(Replay(), trials=3, families=["register", "shared"])
    replay = Replay()
    with pytest.raises(TuneError, match="searched over another space"):
        run(replay, trials=6, families=["shared", "register"])
    assert replay.calls == []


def test_resuming_after_a_family_gained_a_parameter_is_refused(monkeypatch):
    run(Replay(), trials=3)
    monkeypatch.setattr(kernels.register, "SPACE", {**kernels.register.SPACE, "swizzle": [False, True]})
    with pytest.raises(TuneError, match="kernels of an older mmtune"):
        run(Replay(), trials=6)


def test_a_trial_another_worker_is_still_suggesting_does_not_block_resuming():
    study = load(run(Replay(), trials=3))
    study.ask().suggest_categorical("family", ["register"])  # its other parameters still to come
    assert run(Replay(), trials=5).new_trials == 2


def test_infeasible_suggestions_are_pruned_without_measuring():
    replay = Replay()
    result = run(replay, trials=10, families=["naive"], sampler="random", seed=3)
    study = load(result)
    pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert pruned and all("threads per block > 1024" in t.user_attrs["infeasible"] for t in pruned)
    assert len(replay.calls) == 10 + min(FINALISTS, 10)


def test_warm_start_enqueues_the_nearest_tuned_configs():
    Cache().record(dict(device="simulator", dtype="float32", m=100, n=80, k=64, family="register", params=FAST, gflops=1.0))
    replay = Replay()
    run(replay, trials=3)
    assert replay.calls[:2] == [config_key("register", FAST), config_key("register", REG)]


def test_a_cold_study_tries_the_families_defaults_best_guess_first():
    replay = Replay()
    run(replay, trials=5, families=list(FAMILY_NAMES))
    assert replay.calls[:5] == [config_key(f, kernels.family(f).DEFAULT) for f in FIRST_GUESSES]


@pytest.mark.parametrize("sampler", ["climb", "random", "grid", "tpe"])
def test_samplers_search(sampler):
    replay = Replay()
    result = run(replay, trials=4, sampler=sampler, families=["shared"])
    assert result.trials == 4 and result.row["family"] == "shared"


def test_the_seed_makes_tpe_repeatable(tmp_path, monkeypatch):
    calls = []
    for i in range(2):
        monkeypatch.setenv("MMTUNE_CACHE", str(tmp_path / str(i) / "cache.db"))
        replay = Replay(default=1.0)
        run(replay, trials=12, seed=7)
        calls.append(replay.calls)
    assert calls[0] == calls[1]


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_gp_without_torch_says_so():
    with pytest.raises(TuneError, match="the gp sampler needs PyTorch"):
        run(Replay(), sampler="gp")


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(m=0), "M, N and K must be positive"),
        (dict(dtype="float16"), "unsupported dtype 'float16'"),
        (dict(families=["tensor"]), "unknown kernel family 'tensor'"),
        (dict(trials=0), "--trials must be at least 1"),
        (dict(sampler="annealing"), "unknown sampler 'annealing'"),
    ],
)
def test_bad_requests_are_refused(options, message):
    args = dict(m=4, n=4, k=4, show_progress=False, measurer=Replay())
    args.update(options)
    with pytest.raises(TuneError, match=message):
        tune(**args)


def test_a_real_simulated_tune():
    """No replay: kernels are built, verified and timed in the simulator."""
    result = tune(5, 7, 3, "float64", trials=2, families=["shared"], show_progress=False)
    assert result.trials == 2 and result.row["family"] == "shared" and result.written
    study = load(result)
    assert all(t.user_attrs["verify_error"] < 1e-12 for t in study.trials)


def test_repeated_proposals_are_not_remeasured_and_a_small_space_ends_the_search():
    replay = Replay()
    result = run(replay, trials=40, families=["shared"], sampler="tpe")
    assert result.trials == 9  # the whole shared space: 3 tile sizes x 3 paddings
    searched = replay.calls[:9]
    assert len(set(searched)) == 9 and len(replay.calls) == 9 + FINALISTS
    repeats = [t for t in load(result).trials if "repeat_of" in t.user_attrs]
    assert all(t.value == load(result).trials[t.user_attrs["repeat_of"]].value for t in repeats)


def test_worker_processes_share_one_study():
    """Two spawned workers (each its own simulator 'GPU') search one study; measuring is locked."""
    result = run(Replay(default=10.0), trials=6, jobs=2)
    study = load(result)
    measured = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and "repeat_of" not in t.user_attrs]
    assert result.trials == len(measured) and 6 <= len(measured) <= 7  # each worker may finish one in flight
    assert len({t.number for t in measured}) == len(measured)
    assert all(t.user_attrs["median_ms"] > 0 for t in measured)
    assert Cache().get("simulator", "float32", *SHAPE)["trials"] == result.trials


def test_jobs_must_be_positive():
    with pytest.raises(TuneError, match="--jobs must be at least 1"):
        run(Replay(), jobs=0)


class SlowReplay(Replay):
    """Takes a moment per trial, so every worker gets some."""

    def __call__(self, *args, **kwargs):
        import time

        time.sleep(0.3)
        return super().__call__(*args, **kwargs)


def test_one_worker_per_gpu_on_one_study():
    result = run(SlowReplay(default=10.0), trials=8, gpus=[0, 1], families=["shared"], sampler="random")
    study = load(result)
    measured = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and "repeat_of" not in t.user_attrs]
    assert 8 <= len(measured) <= 9  # each worker may finish one trial in flight
    assert {t.user_attrs["gpu"] for t in measured} == {"0", "1"}
    assert Cache().get("simulator", "float32", *SHAPE)["trials"] == result.trials


def test_gpus_must_be_distinct_indices():
    with pytest.raises(TuneError, match="--gpus needs distinct GPU indices, got \\[0, 0\\]"):
        run(Replay(), gpus=[0, 0])
