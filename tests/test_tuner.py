import dataclasses
import importlib.util
import json

import optuna
import pytest

import kernels
from autotune.store.cache import Cache
from autotune.tune.replay import Replay, config_key
from autotune.space.configs import FAMILY_NAMES, DeviceLimits, GpuLimits
from autotune.space.guesses import few_rows_guess, shape_guesses, small_k_guess, stream_twin
from autotune.tune.finalists import FINAL_LAUNCHES, FINALISTS
import autotune.store.records
import autotune.tune.study
import autotune.tune.tuner
from autotune.select import neighbours
from autotune.tune.study import MEASURED_GUESSES, WarmStart, measured_guesses, study_name, warm_start
from autotune.backends import Device
from dataclasses import replace
from kernels.base import Config
from autotune.tune.tuner import TuneError, TuneRequest, tune
from autotune.tune.workers import Workers
from autotune.space.problem import Problem
from autotune.store.rows import Row
from conftest import on

SHAPE = (96, 80, 64)
REG = kernels.family("register").default
FAST = {**REG, "bm": 32, "bn": 32, "tm": 2, "tn": 2}


@pytest.fixture(autouse=True)
def roomy_host(monkeypatch):
    """Memory for two workers whatever else the machine runs: tests of --jobs 2 test the workers, not
    the host (tests/test_bad_input.py tests the refusal)."""
    monkeypatch.setattr(autotune.tune.tuner, "available_memory", lambda: 64 * 2**30)


def run(replay, trials=8, **options):
    options.setdefault("families", ["register"])
    options.setdefault("jobs", 1)
    return tune(TuneRequest(*SHAPE, trials=trials, **options), replay, show_progress=False)


def load(result):
    return optuna.load_study(study_name=result.study_name, storage=_journal())


def _journal():
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(str(Cache().path.parent / "studies.journal")))


def test_tune_writes_the_best_verified_config_to_the_cache():
    replay = Replay({config_key("register", FAST): 500.0}, default=10.0)
    result = run(replay, trials=6)
    assert result.written and result.trials == 6 and result.new_trials == 6
    row = Cache().get(Problem("simulator", "float32", *SHAPE))
    assert (row.family, row.params, row.gflops, row.trials) == ("register", REG, 10.0, 6)
    assert row.study == study_name(Problem("simulator", "float32", *SHAPE, precision="ieee"), narrowed=True) and row.source_hash
    assert row.precision == "ieee"


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
    assert Cache().get(Problem("simulator", "float32", *SHAPE)).gflops == 5.0


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
    with pytest.raises(TuneError, match="searched over other families"):
        run(replay, trials=6, families=["shared", "register"])
    assert replay.calls == []


def test_after_a_family_gained_a_parameter_a_new_study_starts(monkeypatch):
    """Optuna cannot resume a study over another space: an upgrade's tune starts afresh beside it."""
    before = run(Replay(), trials=3)
    register = kernels.family("register")
    monkeypatch.setitem(kernels.FAMILIES, "register", dataclasses.replace(register, space={**register.space, "swizzle": [False, True]}))
    after = run(Replay(), trials=4)
    assert after.study_name != before.study_name and after.new_trials == 4


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


def start(device, shape, families, limits, sm_count=0, cc="", layout="NN"):
    """What warm_start is given for a float32 `shape` on GPU model `device`."""
    problem = Problem(device, "float32", *shape, layout=layout)
    return WarmStart(problem=problem, gpu=Device(device, cc, sm_count), families=families, limits=limits)


def test_warm_start_enqueues_the_nearest_tuned_configs():
    Cache().record(Row(device="simulator", dtype="float32", m=100, n=80, k=64, family="register", params=FAST, gflops=1.0))
    replay = Replay()
    run(replay, trials=3)
    assert replay.calls[:2] == [config_key("register", FAST), config_key("register", REG)]


def test_the_nearest_tuned_tile_is_also_tried_streamed():
    tile = kernels.family("vector").default
    Cache().record(Row(device="simulator", dtype="float32", m=100, n=80, k=64, family="vector", params=tile, gflops=1.0))
    configs = warm_start(Cache(), start("simulator", (100, 80, 64), ["vector", "streamk"], DeviceLimits()))
    assert configs[:2] == [Config.of("vector", tile), stream_twin(Config.of("vector", tile))]


def test_a_tune_of_a_few_rows_or_a_short_k_starts_from_lookups_rule():
    limits, families = GpuLimits.for_cc("9.0"), list(FAMILY_NAMES)
    for layout in ("NN", "NT"):
        configs = warm_start(Cache(), start("NVIDIA H200", (1, 4096, 1024), families, limits, 132, "9.0", layout))
        assert configs[0] == few_rows_guess((1, 4096, 1024), "float32", on(limits, 132), layout=layout)
        assert configs[0].family == "gemv"
    configs = warm_start(Cache(), start("NVIDIA H200", (2008, 944, 60), families, limits, 132, "9.0"))
    assert configs[0] == small_k_guess((2008, 944, 60), "float32", on(limits, 132))
    configs = warm_start(Cache(), start("NVIDIA H200", (2896, 1713, 96), families, limits, 132, "9.0", "NT"))
    assert configs[0] == small_k_guess((2896, 1713, 96), "float32", on(limits, 132), "NT")
    assert configs[0] != small_k_guess((2896, 1713, 96), "float32", on(limits, 132))  # B's rows: K long in NT


def test_a_gpu_model_without_rows_warm_starts_from_its_architectures_records(monkeypatch):
    """An H100 with no records of its own is served the H200's; a cold H100 tune that started from
    its own rows only found configs slower than those (docs/performance.md, step 22)."""
    h200 = Row(device="NVIDIA H200", cc="9.0", sm_count=132, dtype="float32", m=100, n=80, k=64, family="register",
               params=FAST, gflops=1.0)
    a100 = replace(h200, device="NVIDIA A100", cc="8.0", params={**REG, "bm": 64, "tm": 4})
    monkeypatch.setattr(autotune.tune.study, "shipped_rows", lambda device=None, dtype=None: [
        r for r in (h200, a100) if device in (None, r.device)])
    configs = warm_start(Cache(), start("NVIDIA H100 80GB HBM3", (100, 80, 64), ["register"], DeviceLimits(), cc="9.0"))
    assert configs == [Config.of("register", FAST), Config.of("register", REG)]  # not the other architecture's
    assert warm_start(Cache(), start("NVIDIA H100 80GB HBM3", (100, 80, 64), ["register"],
                                     DeviceLimits())) == [Config.of("register", REG)]


def test_an_untuned_shape_warm_starts_from_the_measured_tables_best_candidates():
    """After the shape rule's guesses come the picks lookup would rank first for the shape, from
    the table of the GPU model, else of its architecture (autotune.select.neighbours)."""
    limits = DeviceLimits.for_cc("9.0")
    shape = (1000, 1000, 1000)
    (table,) = [t for t in autotune.store.records.measured_tables() if t["device"] == "NVIDIA H200"]
    families = ["vector", "splitk", "streamk"]  # the table ranks a wgmma tile among its best here: not searched
    ranked = [Config.of(p.family, p.config) for p in neighbours.ranked(
        table, shape, 132, lambda family, params: family in families, count=MEASURED_GUESSES)]
    assert "wgmma" in {p.family for p in neighbours.ranked(table, shape, 132, count=MEASURED_GUESSES)}
    configs = warm_start(Cache(), start("NVIDIA H100 80GB HBM3", shape, families, limits, 132, "9.0"))
    guesses = shape_guesses(shape, "float32", on(limits, 132))
    assert len(ranked) == MEASURED_GUESSES and configs[:len(guesses)] == guesses
    assert [c for c in configs if c in ranked] == ranked
    t4 = GpuLimits.for_cc("7.5")  # no table of its architecture: the H200's, within what it compiles
    on_t4 = measured_guesses(start("Tesla T4", shape, ["vector"], t4, 40, "7.5"))
    assert len(on_t4) == MEASURED_GUESSES and not [c for c in on_t4 if c.params["async_copy"]]
    assert not measured_guesses(start("simulator", shape, ["vector"], t4, 40))  # no architecture known


def test_a_cold_study_tries_the_families_defaults_best_guess_first():
    replay = Replay()
    float32 = [f for f in FAMILY_NAMES if f != "dmma"]
    request = TuneRequest(64, 64, 256, trials=7, jobs=1, families=float32, precision="tf32x3")  # K: precision.MIN_K
    tune(request, replay, show_progress=False)
    assert replay.calls[:7] == [config_key(f, kernels.family(f).default)
                                for f in ["tf32x3", "vector", "splitk", "register", "streamk", "shared", "naive"]]


@pytest.mark.parametrize("sampler", ["climb", "random", "grid", "tpe"])
def test_samplers_search(sampler):
    replay = Replay()
    result = run(replay, trials=4, sampler=sampler, families=["shared"])
    assert result.trials == 4 and result.row.family == "shared"


def test_the_seed_makes_tpe_repeatable(tmp_path, monkeypatch):
    calls = []
    for i in range(2):
        monkeypatch.setenv("MMTUNE_CACHE", str(tmp_path / str(i) / "cache.db"))
        replay = Replay(default=1.0)
        run(replay, trials=12, seed=7)
        calls.append(replay.calls)
    assert calls[0] == calls[1]


def test_gp_without_torch_says_so(monkeypatch):
    """As where torch is not installed (the test extra installs it)."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "torch" else find_spec(name, *rest))
    with pytest.raises(TuneError, match="the gp sampler needs PyTorch"):
        run(Replay(), sampler="gp")


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(m=0), "M, N and K must be positive"),
        (dict(dtype="float16"), "unsupported dtype 'float16'"),
        (dict(families=["tensor"]), "unknown kernel family 'tensor'"),
        (dict(trials=0), "--trials must be at least 1"),
        (dict(timeout=0), "--timeout must be a positive number of seconds, got 0"),
        (dict(jobs=10_000), "more than the .* CPU cores this process may use; give --jobs .* or fewer"),
        (dict(sampler="annealing"), "unknown sampler 'annealing'"),
    ],
)
def test_bad_requests_are_refused(options, message):
    args = dict(m=4, n=4, k=4)
    args.update(options)
    with pytest.raises(TuneError, match=message):
        tune(TuneRequest(**args), Replay(), show_progress=False)


def test_a_real_simulated_tune():
    """No replay: kernels are built, verified and timed in the simulator."""
    result = tune(TuneRequest(5, 7, 3, "float64", trials=2, families=["shared"], jobs=1), show_progress=False)
    assert result.trials == 2 and result.row.family == "shared" and result.written
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
    assert Cache().get(Problem("simulator", "float32", *SHAPE)).trials == result.trials


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
    assert Cache().get(Problem("simulator", "float32", *SHAPE)).trials == result.trials


def test_workers_are_kept_from_one_tune_to_the_next_and_a_dead_one_is_replaced(tmp_path):
    """tune --recorded's workers: the same processes search the next product's study."""
    pids, owners = [], []
    with Workers([None, None], Cache().path.parent) as workers:
        for shape in ((96, 80, 64), (48, 40, 32), (24, 20, 16)):
            result = tune(TuneRequest(*shape, trials=4, families=["shared"], sampler="random", jobs=2), SlowReplay(),
                          show_progress=False, workers=workers)
            assert result.trials >= 4
            pids.append([process.pid for process, _ in workers._workers])
            owners.append({int(t.user_attrs["owner"].rsplit(":", 1)[1]) for t in load(result).trials
                           if "owner" in t.user_attrs})
            if len(pids) == 2:
                workers._workers[0][0].kill()
                workers._workers[0][0].join()
    assert pids[0] == pids[1] and pids[2][0] != pids[1][0] and pids[2][1] == pids[1][1]
    assert all(found and found <= set(ids) for found, ids in zip(owners, pids))
    assert all(found is None for found in workers._workers)  # closed


class Interrupted:
    """A progress display that fails at its second redraw, as a lost storage would."""

    def __init__(self):
        self.shown = 0

    def show(self, study):
        self.shown += 1
        if self.shown == 2:
            raise RuntimeError("storage lost")


def test_workers_whose_search_is_abandoned_are_stopped_so_the_next_search_is_not_answered_by_it():
    from autotune.tune.workers import Search, StudyRun
    from autotune.tune.storage import open_storage

    spec = str(Cache().path.parent / "studies.journal")
    optuna.create_study(study_name="abandoned", storage=open_storage(spec), direction="maximize")
    study = optuna.load_study(study_name="abandoned", storage=open_storage(spec))
    search = Search(shape=SHAPE, dtype="float32", families=["shared"], seed=0, limits=DeviceLimits(),
                    measurer=SlowReplay(), lock=None)
    run = StudyRun(name="abandoned", spec=spec, sampler="random", seed=0, goal=6, timeout=None)
    with Workers([None, None], Cache().path.parent) as workers:
        with pytest.raises(RuntimeError, match="storage lost"):
            workers.run(search, run, study, Interrupted())
        assert workers._workers == [None, None]  # stopped, not left searching


def test_workers_placed_otherwise_than_the_request_asks_are_refused():
    with Workers([None, None, None], Cache().path.parent) as workers, pytest.raises(TuneError, match="placed as"):
        tune(TuneRequest(*SHAPE, trials=2, families=["shared"], jobs=2), Replay(), show_progress=False,
             workers=workers)


def test_gpus_must_be_distinct_indices():
    with pytest.raises(TuneError, match="--gpus needs distinct GPU indices, got \\[0, 0\\]"):
        run(Replay(), gpus=[0, 0])


class KilledWhileRetiming(Replay):
    """Dies (as if killed) at the given re-timing, a call with repeat=FINAL_LAUNCHES."""

    def __init__(self, die_at: int, **options):
        super().__init__(**options)
        self.retimings, self.die_at = 0, die_at

    def __call__(self, kernel, shape, rng, warmup=3, repeat=20, lock=None):
        if repeat == FINAL_LAUNCHES:
            self.retimings += 1
            if self.retimings == self.die_at:
                raise KeyboardInterrupt
        return super().__call__(kernel, shape, rng, warmup, repeat, lock)


def test_a_rerun_after_a_kill_while_retiming_finishes_the_retiming_without_searching():
    table = {config_key("register", REG): 500.0}
    with pytest.raises(KeyboardInterrupt):
        run(KilledWhileRetiming(2, table=table, default=10.0), trials=6)
    assert Cache().get(Problem("simulator", "float32", *SHAPE)) is None
    rerun = Replay(table, default=10.0)
    result = run(rerun, trials=6)
    assert result.new_trials == 0 and result.written
    assert len(rerun.calls) == FINALISTS - 1  # the first finalist's result was kept
    assert Cache().get(Problem("simulator", "float32", *SHAPE)).params == REG
    again = Replay(table)
    run(again, trials=6)
    assert again.calls == []  # every finalist was re-timed on today's code


def test_jobs_default_to_the_usable_cores_capped():
    import os

    from autotune.tune.tuner import MAX_DEFAULT_JOBS, default_jobs, memory_jobs

    expected = min(len(os.sched_getaffinity(0)), memory_jobs(), MAX_DEFAULT_JOBS)
    assert TuneRequest(1, 1, 1).jobs == default_jobs() == expected


def test_the_eta_counts_the_trials_and_finalists_left():
    from autotune.tune.progress import Progress

    progress = Progress(False, done=0, total=10, timeout=None, finalists=3)
    assert progress.eta(0) == "ETA -"
    progress.started -= 10.0  # 10 s for the first 5 trials: 2 s each, 5 trials and 3 finalists left
    assert progress.eta(5) == "ETA 16 s"


def test_every_family_module_is_in_the_registry_in_first_guess_order():
    import pkgutil

    modules = {info.name for info in pkgutil.iter_modules(kernels.__path__)}
    families = [entry for entry in kernels.FAMILIES.values()]
    assert {entry.build.__module__.rsplit(".", 1)[1] for entry in families} <= modules
    assert [e.first_guess for e in families] == sorted(e.first_guess for e in families)
    assert list(kernels.FAMILIES) == [e.name for e in families] == ["wgmma", "dmma", "tf32x3", "vector", "splitk", "register", "streamk", "shared", "naive", "gemv"]


class Locking(Replay):
    """A measurer that records the lock each re-timing (a call with FINAL_LAUNCHES) holds."""

    def __init__(self, **options):
        super().__init__(**options)
        self.locks = []

    def __call__(self, kernel, shape, rng, warmup=3, repeat=20, lock=None):
        if repeat == FINAL_LAUNCHES:
            self.locks.append(lock)
        return super().__call__(kernel, shape, rng, warmup, repeat, lock)


def test_finalists_are_retimed_in_the_tunes_measurer_holding_the_lock():
    measurer = Locking(default=10.0)
    result = run(measurer, trials=5)
    assert len(measurer.locks) == FINALISTS and len(set(measurer.locks)) == 1 and measurer.locks[0].endswith("measure.lock")
    assert len(measurer.calls) == 5 + FINALISTS and result.written


def test_a_skinny_shape_starts_from_the_shape_rule(monkeypatch):
    """On a GPU with SMs to fill, a cold study of a skinny shape tries the rule's split-K config
    first (autotune.space.guesses.shape_guesses), ahead of the families' defaults."""
    monkeypatch.setenv("MMTUNE_PRETEND_GPU", "NVIDIA H200;9.0;132")
    replay = Replay()
    tune(TuneRequest(16, 4096, 4096, trials=2, families=["vector", "splitk"], jobs=1), replay, show_progress=False)
    first = shape_guesses((16, 4096, 4096), "float32", on(DeviceLimits.for_cc("9.0"), 132))[0]
    assert first.family == "splitk" and replay.calls[0] == first.key


def test_a_tune_searches_the_families_that_take_its_dtype_on_its_gpu():
    tensor_cores = TuneRequest(4, 4, 256, precision="tf32x3")  # a K that takes the tensor cores (precision.MIN_K)
    ffma = ["vector", "splitk", "register", "streamk", "shared", "naive", "gemv"]
    assert tensor_cores.families_on("9.0") == ["wgmma", "tf32x3", *ffma]  # wgmma: sm_90a alone
    assert TuneRequest(4, 4, 4).families_on("9.0") == ffma
    assert TuneRequest(4, 4, 4, dtype="float64").families_on("8.0") == ["dmma", "vector", "splitk", "register", "streamk", "shared", "naive", "gemv"]
    assert TuneRequest(4, 4, 4, dtype="int32").families_on("9.0") == ["vector", "splitk", "register", "streamk", "shared", "naive", "gemv"]
    assert TuneRequest(4, 4, 4, dtype="float64", families=["vector"]).families_on("9.0") == ["vector"]
    assert "gemv" in TuneRequest(16, 4, 4).families_on("9.0") and "gemv" not in TuneRequest(17, 4, 4).families_on("9.0")
    for cc in ("7.0", "7.5"):  # no tensor cores that mma.sync drives; float32 split-K adds 16 bytes from sm_90 on
        assert TuneRequest(4, 4, 4, dtype="float64").families_on(cc) == ["vector", "splitk", "register", "streamk", "shared", "naive", "gemv"]
        assert TuneRequest(4, 4, 4).families_on(cc) == ["vector", "register", "shared", "naive", "gemv"]
    assert tensor_cores.families_on("8.6") == ["tf32x3", "vector", "register", "shared", "naive", "gemv"]
    assert TuneRequest(4, 4, 4, dtype="float64").families_on("8.6")[0] == "dmma"
    with pytest.raises(TuneError, match="compute capability 7.5.*tf32x3"):
        TuneRequest(4, 4, 4, families=["vector", "tf32x3"], precision="tf32x3").families_on("7.5")
    with pytest.raises(TuneError, match="tf32x3 kernels compute in tf32x3 precision, which --precision ieee does not"):
        TuneRequest(4, 4, 4, families=["vector", "tf32x3"]).families_on("9.0")
    with pytest.raises(TuneError, match="compute capability 8.0.*float32 kernels of splitk need"):
        TuneRequest(4, 4, 4, families=["splitk"]).families_on("8.0")


def test_a_tune_on_a_gpu_before_sm80_never_tries_kernels_it_cannot_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTUNE_PRETEND_GPU", "Tesla T4;7.5;40")
    replay = Replay()
    result = tune(TuneRequest(64, 64, 64, trials=12, jobs=1), replay, tmp_path / "cache.db", show_progress=False)
    assert result.new_trials == 12
    assert replay.calls and not [key for key in replay.calls if key.startswith(("tf32x3", "dmma", "splitk"))]
    assert not [key for key in replay.calls if json.loads(key.split(":", 1)[1]).get("async_copy")]
    with pytest.raises(TuneError, match="lacks instructions that float32 kernels of tf32x3 need"):
        tune(TuneRequest(64, 64, 64, trials=2, families=["tf32x3"], jobs=1), replay, tmp_path / "cache.db",
             show_progress=False)


class NeverStarts(Replay):
    """A measurer whose measuring process never starts."""

    def __call__(self, *args, **kwargs):
        from autotune.errors import InfrastructureFailure

        raise InfrastructureFailure("the measuring process did not start: replayed")


def test_worker_processes_stop_after_three_machinery_failures_in_a_row():
    from autotune.errors import InfrastructureFailure
    from autotune.tune.study import INFRASTRUCTURE

    with pytest.raises(InfrastructureFailure, match="3 trials in a row failed for reasons not of their configs "
                                                    "\\(the last: the measuring process did not start: replayed\\)"):
        run(NeverStarts(), trials=4, jobs=2, families=["shared"])
    study = optuna.load_study(study_name=optuna.get_all_study_names(_journal())[0], storage=_journal())
    failed = [t for t in study.trials if INFRASTRUCTURE in t.user_attrs]
    assert len(failed) >= 3 and all(t.state == optuna.trial.TrialState.FAIL for t in failed)
    assert Cache().rows() == []
