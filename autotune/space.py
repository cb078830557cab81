"""The search space: each family's parameters as data, cut by the device's limits.

Nothing here compiles or launches a kernel except `compile_check`, which compiles for a target
architecture on the CPU to read the resources a config really uses.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import kernels
from kernels.base import Config, DeviceLimits, all_configs

FAMILY_NAMES = tuple(kernels.FAMILIES)
#: the family whose DEFAULT config `matmul` falls back to: small tiles that suit any shape and
#: every dtype
DEFAULT_FAMILY = "register"


def device_limits() -> DeviceLimits:
    """The current device's limits (the defaults under the simulator)."""
    from autotune import backends

    return backends.current().limits()


def infeasibility(family: str, config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    """Why `config` of `family` cannot run on a device with `limits`, or None if it can."""
    entry = kernels.family(family)
    unknown = set(config) ^ set(entry.space)
    if unknown:
        return f"parameters {sorted(unknown)} do not match family {family!r}"
    for name, value in config.items():
        if value not in entry.space[name]:
            return f"{name}={value!r} is not one of {entry.space[name]}"
    return entry.restrict(config, dtype, limits)


def feasible_configs(family: str, dtype: str, limits: DeviceLimits) -> list[dict]:
    entry = kernels.family(family)
    return [c for c in all_configs(entry.space) if entry.restrict(c, dtype, limits) is None]


def default_config(family: str) -> dict:
    return dict(kernels.family(family).default)


def sample_configs(
    family: str, dtype: str, limits: DeviceLimits, count: int, seed: int = 0
) -> list[dict]:
    """`count` distinct feasible configs drawn at random, the family's default first."""
    rest = [c for c in feasible_configs(family, dtype, limits) if c != default_config(family)]
    drawn = random.Random(seed).sample(rest, min(count - 1, len(rest))) if count > 1 else []
    return [default_config(family), *drawn][:count]


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


@dataclass(frozen=True)
class CompileCheck:
    family: str
    config: dict
    dtype: str
    resources: dict | None  # kernels.resources.Resources as a dict
    error: str | None  # compile failure, or the resource problem that keeps it from running

    @property
    def ok(self) -> bool:
        return self.error is None


def compile_check(
    family: str, configs: list[dict], dtype: str, limits: DeviceLimits, cc: tuple[int, int] = (9, 0)
) -> list[CompileCheck]:
    """Compile each config for `cc` on the CPU and read registers, spills and shared memory."""
    from kernels.resources import compile_report, require_compiler

    require_compiler()
    results = []
    for config in configs:
        kernel = kernels.build(family, config, dtype)
        try:
            resources = compile_report(kernel, cc)
        except Exception as error:  # any compiler failure is this config's verdict, not ours
            results.append(CompileCheck(family, config, dtype, None, f"{type(error).__name__}: {error}"))
            continue
        problem = resources.problem(kernel.threads, limits)
        results.append(CompileCheck(family, config, dtype, resources.as_dict(), problem))
    return results
