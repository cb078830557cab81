"""The search space: each family's parameters as data, cut by the device's limits.

Nothing here compiles or launches a kernel except `compile_check`, which compiles for a target
architecture on the CPU to read the resources a config really uses.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import kernels
from kernels.base import DeviceLimits, all_configs

FAMILY_NAMES = tuple(kernels.FAMILIES)
#: the family whose DEFAULT config `matmul` falls back to: small tiles that suit any shape and
#: every dtype
DEFAULT_FAMILY = "register"


def device_limits() -> DeviceLimits:
    """The current CUDA device's limits; the defaults under the simulator."""
    from numba import config, cuda

    if config.ENABLE_CUDASIM:
        return DeviceLimits()
    attrs = cuda.get_current_device()
    return DeviceLimits(
        max_threads_per_block=attrs.MAX_THREADS_PER_BLOCK,
        max_shared_per_block=min(attrs.MAX_SHARED_MEMORY_PER_BLOCK, 48 * 1024),
        max_registers_per_block=attrs.MAX_REGISTERS_PER_BLOCK,
        max_threads_per_sm=attrs.MAX_THREADS_PER_MULTIPROCESSOR,
    )


def infeasibility(family: str, config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    """Why `config` of `family` cannot run on a device with `limits`, or None if it can."""
    module = kernels.family(family)
    unknown = set(config) ^ set(module.SPACE)
    if unknown:
        return f"parameters {sorted(unknown)} do not match family {family!r}"
    for name, value in config.items():
        if value not in module.SPACE[name]:
            return f"{name}={value!r} is not one of {module.SPACE[name]}"
    return module.restrict(config, dtype, limits)


def feasible_configs(family: str, dtype: str, limits: DeviceLimits) -> list[dict]:
    module = kernels.family(family)
    return [c for c in all_configs(module.SPACE) if module.restrict(c, dtype, limits) is None]


def default_config(family: str) -> dict:
    return dict(kernels.family(family).DEFAULT)


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


def suggest(trial, families: list[str], dtype: str) -> tuple[str, dict]:
    """Ask an Optuna trial for a family and its parameters (named "family.param")."""
    family = trial.suggest_categorical("family", list(families))
    config = {}
    for name, values in kernels.family(family).SPACE.items():
        key = f"{family}.{name}"
        if ordinal(values):
            config[name] = values[trial.suggest_int(key, 0, len(values) - 1)]
        else:
            config[name] = trial.suggest_categorical(key, values)
    return family, config


def distributions(families: list[str]) -> dict:
    """The Optuna distribution of every parameter `suggest` may ask for, by name: a study whose
    trials used other ones was searched over another space (other families, or older code)."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    found = {"family": CategoricalDistribution(list(families))}
    for family in families:
        for name, values in kernels.family(family).SPACE.items():
            ordered = ordinal(values)
            found[f"{family}.{name}"] = IntDistribution(0, len(values) - 1) if ordered else CategoricalDistribution(values)
    return found


def trial_params(family: str, config: dict) -> dict:
    """The Optuna parameters that `suggest` records for (family, config): for enqueueing."""
    space = kernels.family(family).SPACE
    params = {"family": family}
    for name, value in config.items():
        params[f"{family}.{name}"] = space[name].index(value) if ordinal(space[name]) else value
    return params


def config_of(params: dict) -> tuple[str, dict]:
    """(family, config) from the parameters of a trial that `suggest` filled."""
    family = params["family"]
    space = kernels.family(family).SPACE
    config = {}
    for name, values in space.items():
        value = params[f"{family}.{name}"]
        config[name] = values[value] if ordinal(values) else value
    return family, config


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
