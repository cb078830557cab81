"""The search space: each family's parameters as data, cut by the device's limits.

Nothing here compiles or launches a kernel except `compile_check`, which compiles for a target
architecture on the CPU to read the resources a config really uses.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, fields
from typing import Callable, Iterator

import kernels
from autotune.space.precision import allows
from kernels.contract import OPT_IN_SHARED, DeviceLimits, all_configs
from kernels.rules import Arch

FAMILY_NAMES = tuple(kernels.FAMILIES)


#: the family whose DEFAULT config `matmul` falls back to (the one whose Family sets `fallback`)
DEFAULT_FAMILY = next(name for name, entry in kernels.FAMILIES.items() if entry.fallback)


@dataclass(frozen=True)
class GpuLimits(DeviceLimits):
    """A GPU as the rules see it, in one value: what a block may use (DeviceLimits), its compute
    capability ("" where unknown) and its SMs (0 where unknown). The families' restrictions weigh
    resources; the compute capability decides which instructions a config may use
    (arch_infeasibility), so that a tune or a lookup on an older GPU never picks a kernel that
    cannot compile there; the SMs decide how the shape rules split K (autotune.space.guesses)."""

    cc: str = ""
    sm_count: int = 0

    @classmethod
    def of(cls, limits: DeviceLimits, cc: str | None, sm_count: int = 0) -> "GpuLimits":
        return cls(**{f.name: getattr(limits, f.name) for f in fields(DeviceLimits)}, cc=cc or "", sm_count=sm_count)

    @classmethod
    def for_cc(cls, cc: str | tuple | None, sm_count: int = 0) -> "GpuLimits":
        key = str(Arch.of(cc)) if cc else None
        return cls.of(DeviceLimits.for_cc(key), key, sm_count)


def device_limits() -> GpuLimits:
    """The current device's limits, compute capability and SMs (the defaults under the simulator,
    with the compute capability and SMs of the GPU it pretends to be)."""
    from autotune import backends

    backend = backends.current()
    device = backend.device()
    return GpuLimits.of(backend.limits(), device.cc, device.sm_count)


def arch_infeasibility(family: str, config: dict, dtype: str, cc: str | None) -> str | None:
    """Why `config` of `family` in `dtype` does not compile for compute capability `cc`, or None
    if it does (or `cc` is unknown): the instructions it needs (Family.instructions) that `cc`
    lacks."""
    if not cc:
        return None
    for instruction, arch in kernels.family(family).instructions(config, dtype).items():
        if not Arch.of(cc).has(arch):
            return f"{instruction} needs compute capability {Arch.of(arch)}, this GPU has {cc}"
    return None


def infeasibility(family: str, config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    """Why `config` of `family` cannot run on a device with `limits` (and, for GpuLimits, its
    compute capability), or None if it can."""
    entry = kernels.family(family)
    unknown = set(config) ^ set(entry.space)
    if unknown:
        return f"parameters {sorted(unknown)} do not match family {family!r}"
    for name, value in config.items():
        if value not in entry.space[name]:
            return f"{name}={value!r} is not one of {entry.space[name]}"
    return entry.restrict(config, dtype, limits) or arch_infeasibility(family, config, dtype, getattr(limits, "cc", ""))


def feasible_configs(family: str, dtype: str, limits: DeviceLimits) -> list[dict]:
    return list(_feasible(family, dtype, limits))


def feasible_count(families: list[str], dtype: str, limits: DeviceLimits, at_most: int) -> int:
    """How many feasible configs the families hold, counted no further than `at_most`: a tune's
    goal is its trials, or the whole space where that is smaller, and a space may hold hundreds of
    thousands of configs, which take seconds to enumerate."""
    found = itertools.chain.from_iterable(_feasible(family, dtype, limits) for family in families)
    return sum(1 for _ in itertools.islice(found, at_most))


def _feasible(family: str, dtype: str, limits: DeviceLimits) -> Iterator[dict]:
    entry, cc = kernels.family(family), getattr(limits, "cc", "")
    names = list(entry.space)
    for values in itertools.product(*entry.space.values()):
        config = dict(zip(names, values))
        if entry.restrict(config, dtype, limits) is None and arch_infeasibility(family, config, dtype, cc) is None:
            yield config


def families_for(dtype: str, cc: str | None = None, m: int | None = None, precision: str | None = None,
                 k: int | None = None) -> list[str]:
    """The families whose kernels multiply `dtype` (whose restriction takes their default config
    in it, within the shared memory such a GPU allows) on a GPU of compute capability `cc` (None
    or "": any; runs_on), for products of `m` rows (None: any; Family.max_rows), in a precision
    that `precision` allows for a K of `k` terms (None: any; autotune.space.precision), in
    kernels.FAMILIES order: what a tune searches unless told."""
    limits = DeviceLimits.for_cc(cc) if cc else DeviceLimits(max_dynamic_shared_per_block=max(OPT_IN_SHARED.values()))
    return [name for name, entry in kernels.FAMILIES.items()
            if entry.restrict(entry.default, dtype, limits) is None and runs_on(name, dtype, cc)
            and (m is None or entry.max_rows is None or m <= entry.max_rows)
            and (precision is None or allows(precision, entry.precision, k))]


def runs_on(family: str, dtype: str, cc: str | None) -> bool:
    """Whether GPUs of compute capability `cc` have the instructions of some config of `family`
    in `dtype` (Family.oldest_arch): a tensor-core family needs the oldest architecture of its
    instructions, float32 split-K and stream-K the 16-byte atomic adds."""
    needs = kernels.family(family).oldest_arch(dtype)
    return not cc or needs is None or Arch.of(cc).has(needs)


def default_config(family: str) -> dict:
    return dict(kernels.family(family).default)


#: a family space of at most this many configs is enumerated to sample it; a larger one is drawn
#: from parameter by parameter, at most SAMPLE_DRAWS_PER_CONFIG draws per config asked for
ENUMERATED_SPACE, SAMPLE_DRAWS_PER_CONFIG = 20_000, 2_000


def sample_configs(family: str, dtype: str, limits: DeviceLimits, count: int, seed: int = 0,
                   accept: Callable[[dict], bool] | None = None) -> list[dict]:
    """`count` distinct feasible configs (that `accept` takes too, if given) drawn at random with
    `seed`, the family's default first where it qualifies; fewer where fewer are found; a
    ValueError where none is. A large space is sampled without enumerating it, so that a sample
    costs milliseconds whatever the space's size."""
    entry, rng = kernels.family(family), random.Random(seed)

    def qualifies(config: dict) -> bool:
        return infeasibility(family, config, dtype, limits) is None and (accept is None or accept(config))

    default = default_config(family)
    found = [default] if qualifies(default) else []
    if math.prod(len(values) for values in entry.space.values()) <= ENUMERATED_SPACE:
        rest = [c for c in all_configs(entry.space) if c != default and qualifies(c)]
        found += rng.sample(rest, min(max(count - len(found), 0), len(rest)))
    else:
        for _ in range(SAMPLE_DRAWS_PER_CONFIG * count):
            if len(found) >= count:
                break
            config = {name: rng.choice(values) for name, values in entry.space.items()}
            if config not in found and qualifies(config):
                found.append(config)
    if not found:
        raise ValueError(f"no {family} config runs here for {dtype}: {infeasibility(family, default, dtype, limits)}")
    return found[:count]
