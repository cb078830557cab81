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


#: a product is skinny when its C is at most this many rows (or columns) wide
SKINNY = 64


def shape_guesses(m: int, n: int, k: int, dtype: str, limits: DeviceLimits, sm_count: int) -> list[Config]:
    """Configs a rule picks for a shape that big square tiles would leave the GPU idle on:
    - skinny (M or N <= SKINNY): the short side in one tile of the next power of 2 (at least 16),
      so the long operand streams through once, 16-byte moves, and K split for two waves;
    - few tiles (fewer 128x128 tiles than SMs): 64x64 tiles in a 4-stage pipeline, and the same
      with K split for two waves.
    Each is a split-K config only where K leaves every split at least 4 steps of BK."""
    pipeline = {"pad": 4, "stages": 4, "unroll": True, "fragments": 1, "wide_fetch": True, "async_copy": True,
                "min_blocks": 1}
    tiles = []
    if min(m, n) <= SKINNY:
        short = max(16, 1 << (min(m, n) - 1).bit_length())
        tall = {"bm": 128, "bn": short, "tm": 8, "tn": 4} if n < m else {"bm": short, "bn": 128, "tm": 4, "tn": 8}
        tiles.append({**tall, "bk": 32})
    elif -(-m // 128) * -(-n // 128) < sm_count:
        tiles.append({"bm": 64, "bn": 64, "bk": 32, "tm": 8, "tn": 4})
    guesses = []
    for tile in tiles:
        splits = wave_splits(m, n, k, tile, sm_count)
        family, params = ("splitk", {**tile, "splits": splits}) if splits > 1 else ("vector", tile)
        guesses += [_deepest(family, {**pipeline, **params}, dtype, limits), _deepest("vector", {**pipeline, **tile}, dtype, limits)]
    return list(dict.fromkeys(c for c in guesses if c is not None))


#: K-splits by wave arithmetic: double them while the blocks fill fewer than this many waves...
SPLIT_WAVES = 2
#: ...and every split keeps at least this many k-steps of BK
MIN_SPLIT_STEPS = 4
MAX_SPLITS = 32


def wave_splits(m: int, n: int, k: int, tile: dict, sm_count: int) -> int:
    """How many ways to split K for a BM x BN tile: the fewest (a power of 2) giving SPLIT_WAVES
    waves of blocks over `sm_count` SMs, as long as each split keeps MIN_SPLIT_STEPS k-steps."""
    blocks = -(-m // tile["bm"]) * -(-n // tile["bn"])
    splits = 1
    while (blocks * splits < SPLIT_WAVES * sm_count and k >= 2 * splits * MIN_SPLIT_STEPS * tile["bk"]
           and splits < MAX_SPLITS):
        splits *= 2
    return splits


def _deepest(family: str, params: dict, dtype: str, limits: DeviceLimits) -> Config | None:
    """The config with the most pipeline stages (4 at most) that `limits` allow."""
    for stages in (4, 3, 2):
        config = Config.of(family, {**params, "stages": stages})
        if infeasibility(family, config.params, dtype, limits) is None:
            return config
    return None


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
