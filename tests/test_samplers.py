"""The `climb` sampler: which configs it proposes, replayed without a GPU."""

import optuna

import kernels
from autotune.store.cache import Cache
from autotune.tune.replay import Replay, config_key
from autotune.tune.samplers import ClimbSampler, neighbours
from autotune.space.configs import DeviceLimits, feasible_configs
from autotune.space.encoding import config_of, suggest, trial_params
from autotune.tune.tuner import TuneRequest, tune

SHAPE = (96, 80, 64)


def run(replay, trials, family):
    return tune(TuneRequest(*SHAPE, trials=trials, families=[family], sampler="climb", jobs=1), replay, show_progress=False)


def measured_configs(result) -> list[dict]:
    from optuna.storages.journal import JournalFileBackend

    storage = optuna.storages.JournalStorage(JournalFileBackend(str(Cache().path.parent / "studies.journal")))
    study = optuna.load_study(study_name=result.study_name, storage=storage)
    return [config_of(t.params).params for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]


def test_neighbours_change_one_parameter_or_swap_two_on_the_same_scale():
    space = {"bm": [32, 64, 128], "bn": [32, 64, 128], "wide": [False, True]}
    found = neighbours({"bm": 32, "bn": 64, "wide": False}, space)
    assert found == [
        {"bm": 64, "bn": 64, "wide": False}, {"bm": 128, "bn": 64, "wide": False},
        {"bm": 32, "bn": 32, "wide": False}, {"bm": 32, "bn": 128, "wide": False},
        {"bm": 32, "bn": 64, "wide": True},
        {"bm": 64, "bn": 32, "wide": False},
    ]


def test_climb_proposes_neighbours_of_the_fastest_config_so_far():
    default = kernels.family("register").default
    faster = {**default, "bk": 16}
    replay = Replay({config_key("register", faster): 50.0}, default=10.0)
    configs = measured_configs(run(replay, 12, "register"))
    assert configs[0] == default and faster in configs
    for i, config in enumerate(configs[1:], 1):
        best = faster if faster in configs[:i] else default
        assert config in neighbours(best, kernels.family("register").space), (i, config)


def test_climb_jumps_to_the_predicted_fastest_config_once_every_neighbour_is_measured():
    assert kernels.family("shared").default == {"tpb": 16, "pad": 0}
    local_optimum = {(16, 0): 100.0, (8, 0): 50.0, (32, 0): 80.0, (16, 1): 90.0, (16, 2): 30.0}
    table = {config_key("shared", {"tpb": tpb, "pad": pad}): gflops for (tpb, pad), gflops in local_optimum.items()}
    configs = measured_configs(run(Replay(table, default=20.0), 6, "shared"))
    assert sorted((c["tpb"], c["pad"]) for c in configs[:5]) == sorted(local_optimum)
    assert configs[5] == {"tpb": 32, "pad": 1}  # the better tpb and the better pad seen, together


def test_a_resumed_climb_measures_every_config_once():
    run(Replay(default=10.0), 5, "shared")
    result = run(Replay(default=10.0), 9, "shared")
    configs = measured_configs(result)
    feasible = feasible_configs("shared", "float32", DeviceLimits())
    assert result.trials == 9 and len(feasible) == 9
    assert sorted(config_key("shared", c) for c in configs) == sorted(config_key("shared", c) for c in feasible)


def test_workers_starting_together_climb_from_the_config_being_measured():
    """With --jobs, the warm start is still running when the other workers ask for a config."""
    sampler = ClimbSampler("float32", DeviceLimits(), seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.enqueue_trial(trial_params(kernels.family("shared").config()))
    first = study.ask()
    assert suggest(first, ["shared"], "float32") == kernels.family("shared").config()
    for _ in range(4):
        config = suggest(study.ask(), ["shared"], "float32").params
        assert config in neighbours(kernels.family("shared").default, kernels.family("shared").space)


def test_workers_climb_from_the_first_warm_start_until_it_is_measured():
    """A warm start queued ahead (the best guess) anchors the climb while it compiles, even if a
    later one, quicker to compile but slower, has finished; after that, the fastest does."""
    sampler = ClimbSampler("float32", DeviceLimits(), seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.enqueue_trial(trial_params(kernels.family("shared").config()))
    study.enqueue_trial(trial_params(kernels.family("naive").config()))
    shared, naive = study.ask(), study.ask()
    assert [suggest(t, ["shared", "naive"], "float32").family for t in (shared, naive)] == ["shared", "naive"]
    study.tell(naive, 10.0)
    for _ in range(3):
        chosen = suggest(study.ask(), ["shared", "naive"], "float32")
        assert chosen.family == "shared" and chosen.params in neighbours(kernels.family("shared").default, kernels.family("shared").space)
    study.tell(shared, 5.0)
    chosen = suggest(study.ask(), ["shared", "naive"], "float32")
    assert chosen.family == "naive" and chosen.params in neighbours(kernels.family("naive").default, kernels.family("naive").space)
