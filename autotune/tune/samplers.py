"""The samplers a study can search with: Optuna's, and `climb`, a local search of our own.

`climb` proposes, each trial, an unmeasured neighbour of the fastest config measured so far: one
parameter changed, or two parameters on the same scale swapped (bm with bn, tm with tn: a tile
turned on its side). Among the neighbours it takes the one a ridge regression over the measured
configs of that family (log GFLOPS on one-hot parameter values) predicts fastest. When every
neighbour has been measured it jumps to the unmeasured feasible config of the family that the
regression predicts fastest, which leaves local optima that a random jump rarely would. It keeps
no state between trials (everything is read from the study), so a resumed study or several worker
processes sharing one go on as one search. Replaying the exhaustive 4096^3 sweeps, it reaches
0.97 of the best within 40 trials for every seed tried, where TPE often stalls near 0.95
(tests/test_search.py, docs/performance.md step 17).
"""

from __future__ import annotations

import importlib.util
import itertools
import warnings
from functools import lru_cache

import numpy as np
import optuna
from optuna.trial import TrialState

import kernels
from autotune.errors import SamplerError
from autotune.space.configs import DeviceLimits, feasible_configs, infeasibility
from autotune.space.encoding import config_of, ordinal, trial_params
from autotune.tune.study import INFRASTRUCTURE
from kernels.contract import Config

SAMPLERS = ("climb", "tpe", "random", "grid", "gp")
RIDGE = 0.3  # shrinks the effects of parameter values seen in few configs


def make_sampler(name: str, seed: int | None, dtype: str = "float32",
                 limits: DeviceLimits | None = None) -> optuna.samplers.BaseSampler:
    """The sampler called `name`; `climb` proposes only configs feasible for `dtype` on a device
    with `limits` (by default the simulator's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "climb":
            return ClimbSampler(dtype, limits, seed)
        if name == "tpe":
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True)
        if name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "grid":
            return optuna.samplers.BruteForceSampler(seed=seed)
        if name == "gp":
            if importlib.util.find_spec("torch") is None:  # GPSampler's own dependency
                raise SamplerError("the gp sampler needs PyTorch (pip install torch)")
            return optuna.samplers.GPSampler(seed=seed)
    raise SamplerError(f"unknown sampler {name!r}; choose from {', '.join(SAMPLERS)}")


class ClimbSampler(optuna.samplers.BaseSampler):
    """Local search around the fastest measured config (see the module docstring), or, while a
    warm start queued ahead of it is still waiting or being measured, around that warm start.
    A trial with no config to climb from, or no unmeasured feasible config left, is sampled at
    random."""

    def __init__(self, dtype: str, limits: DeviceLimits | None = None, seed: int | None = None):
        self.dtype, self.limits = dtype, limits or DeviceLimits()
        self._rng = np.random.default_rng(seed)
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._plans: dict[int, dict] = {}  # trial number -> the Optuna parameters to give it
        self._feasible_configs: dict[str, list[dict]] = {}

    def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if "fixed_params" in trial.system_attrs:  # an enqueued warm start: Optuna fills it
            return
        plan = self._next(study)
        if plan is not None:
            self._plans[trial.number] = trial_params(plan)

    def after_trial(self, study, trial, state, values) -> None:
        self._plans.pop(trial.number, None)

    def infer_relative_search_space(self, study, trial) -> dict:
        return {}

    def sample_relative(self, study, trial, search_space) -> dict:
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        plan = self._plans.get(trial.number, {})
        if param_name in plan:
            return plan[param_name]
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def _next(self, study: optuna.Study) -> Config | None:
        """The config to measure next, or None to sample at random."""
        everything = study.get_trials(deepcopy=False)
        trials = [(t, _config(t)) for t in everything]
        trials = [(t, found) for t, found in trials if found is not None]
        complete = [(t.value, t.number, found) for t, found in trials
                    if t.state == TrialState.COMPLETE and t.value is not None and t.value > 0]
        fastest = max(complete, key=lambda entry: (entry[0], -entry[1])) if complete else None  # ties: the first
        queued = [t for t in everything if "fixed_params" in t.system_attrs and not t.state.is_finished()]
        anchor = _warm_start_ahead(queued, fastest[1] if fastest else None)
        if anchor is not None:
            start = anchor
        elif fastest:
            start = fastest[2]
        elif trials:  # workers starting together climb from the first config another one is measuring
            start = trials[0][1]
        else:
            return None
        family = start.family
        seen = {found for t, found in trials if t.state != TrialState.PRUNED and INFRASTRUCTURE not in t.user_attrs}
        seen |= {config_of(t.system_attrs["fixed_params"]) for t in queued}
        space = kernels.family(family).space
        candidates = [c for c in neighbours(start.params, space) if Config.of(family, c) not in seen
                      and infeasibility(family, c, self.dtype, self.limits) is None]
        if not candidates:
            candidates = [c for c in self._feasible(family) if Config.of(family, c) not in seen]
        if not candidates:
            return None
        measured = [(config.params, value) for value, _, config in complete if config.family == family]
        return Config.of(family, candidates[self._most_promising(candidates, measured, space)])

    def _feasible(self, family: str) -> list[dict]:
        if family not in self._feasible_configs:
            self._feasible_configs[family] = feasible_configs(family, self.dtype, self.limits)
        return self._feasible_configs[family]

    def _most_promising(self, candidates: list[dict], measured: list[tuple[dict, float]], space: dict) -> int:
        """Index of the candidate the ridge regression predicts fastest (at random while the
        family has fewer than 3 measured configs to learn from)."""
        if len(measured) < 3:
            return int(self._rng.integers(len(candidates)))
        columns = _one_hot_columns(tuple((name, tuple(values)) for name, values in space.items()))
        X = np.array([_one_hot(c, columns) for c, _ in measured])
        y = np.log([value for _, value in measured])
        weights = np.linalg.solve(X.T @ X + RIDGE * np.eye(len(columns)), X.T @ (y - y.mean()))
        predicted = np.array([_one_hot(c, columns) for c in candidates]) @ weights
        best = np.flatnonzero(predicted >= predicted.max() - 1e-12)
        return int(best[self._rng.integers(len(best))])


def neighbours(config: dict, space: dict) -> list[dict]:
    """`config` with one parameter changed, or with two ordered parameters on the same scale swapped."""
    found = []
    for name, values in space.items():
        found += [{**config, name: value} for value in values if value != config[name]]
    for a, b in itertools.combinations(space, 2):
        if space[a] == space[b] and ordinal(space[a]) and config[a] != config[b]:
            found.append({**config, a: config[b], b: config[a]})
    return found


def _warm_start_ahead(queued: list, fastest: int | None) -> Config | None:
    """The first of the `queued` warm starts (waiting or being measured) that was queued before
    trial `fastest` (the fastest so far; None: any). The warm starts are
    queued best guess first, so while one is still waiting or compiling, the workers climb from
    it rather than from whichever config finished first (a quickly compiled but slow family)."""
    if queued and (fastest is None or queued[0].number < fastest):
        return config_of(queued[0].system_attrs["fixed_params"])
    return None


def _config(trial: optuna.trial.FrozenTrial) -> Config | None:
    """The config of a trial, or None while another worker's trial is still being suggested."""
    family = trial.params.get("family")
    if family is None or any(f"{family}.{name}" not in trial.params for name in kernels.family(family).space):
        return None
    return config_of(trial.params)


@lru_cache
def _one_hot_columns(space: tuple) -> dict:
    return {(name, value): i for i, (name, value) in enumerate((n, v) for n, values in space for v in values)}


def _one_hot(config: dict, columns: dict) -> np.ndarray:
    row = np.zeros(len(columns))
    row[[columns[(name, value)] for name, value in config.items()]] = 1.0
    return row
