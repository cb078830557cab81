"""A config as Optuna sees it: the distributions of the families' parameters, a trial's
suggestion, and the round trip between a config and a trial's params.
"""

from __future__ import annotations

import kernels
from kernels.contract import Config


def ordinal(values: list) -> bool:
    """Numbers with more than two choices are searched as an ordered scale (an index into the
    sorted values), so the sampler can learn that 128 lies between 64 and 256."""
    return len(values) > 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def suggest(trial, families: list[str], dtype: str) -> Config:
    """Ask an Optuna trial for a family and its parameters (named "family.param")."""
    family = trial.suggest_categorical("family", list(families))
    params = {}
    for name, values in kernels.family(family).space.items():
        key = f"{family}.{name}"
        if ordinal(values):
            params[name] = values[trial.suggest_int(key, 0, len(values) - 1)]
        else:
            params[name] = trial.suggest_categorical(key, values)
    return Config.of(family, params)


def distributions(families: list[str]) -> dict:
    """The Optuna distribution of every parameter `suggest` may ask for, by name: a study whose
    trials used other ones was searched over another space (other families, or older code)."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    found = {"family": CategoricalDistribution(list(families))}
    for family in families:
        for name, values in kernels.family(family).space.items():
            ordered = ordinal(values)
            found[f"{family}.{name}"] = IntDistribution(0, len(values) - 1) if ordered else CategoricalDistribution(values)
    return found


def trial_params(config: Config) -> dict:
    """The Optuna parameters that `suggest` records for `config`: for enqueueing."""
    space = kernels.family(config.family).space
    params = {"family": config.family}
    for name, value in config.items:
        params[f"{config.family}.{name}"] = space[name].index(value) if ordinal(space[name]) else value
    return params


def config_of(params: dict) -> Config:
    """The config of a trial that `suggest` filled, from its Optuna parameters."""
    family = params["family"]
    space = kernels.family(family).space
    return Config.of(family, {
        name: values[params[f"{family}.{name}"]] if ordinal(values) else params[f"{family}.{name}"]
        for name, values in space.items()
    })
