"""Kernel configs the property tests draw from (tests/test_kernels.py, tests/test_runtime.py):
sampled with a fixed seed from each family's feasible space per dtype, or, for the sweep that
`python -m pytest -m sweep` runs, every feasible config (seconds to enumerate); and the build
variants (layout, alignment, offset width) each family and dtype is run in."""

import functools
import math
from dataclasses import dataclass

from conftest import ON_GPU

import kernels
from autotune.space.configs import DeviceLimits, families_for, feasible_configs, sample_configs
from kernels.rules import unaligned_for

#: configs sampled per family and dtype
PROPERTY_SAMPLE = 24
HOPPER_LIMITS = DeviceLimits.for_cc("9.0")


def simulator_friendly(config: dict) -> bool:
    """Few threads and barriers per launch, so one example costs about a second in the simulator."""
    if ON_GPU:
        return True
    if "warps_m" in config:  # each mma meets the block's threads at a barrier in the simulator
        return config["warps_m"] * config["warps_n"] <= 2 and config["bm"] * config["bn"] <= 32 * 64
    if "bk" not in config and "bm" in config:  # wgmma: each instruction meets the block's threads at a barrier
        return config["bm"] * config["bn"] <= 64 * 64 and config["splits"] <= 2
    if "bm" in config:
        return config["bm"] * config["bn"] <= 64 * 64 and config["bk"] >= 8
    if "tpb" in config:
        return config["tpb"] >= 16
    if "threads" in config:  # gemv: few threads, and few blocks on the property test's shapes
        return config["threads"] <= 64 and config["rows"] >= 4 and config["cols"] >= 32
    return config["block_x"] * config["block_y"] <= 256


@functools.cache
def property_configs(every: bool = False) -> dict[tuple[str, str], list[dict]]:
    """(family, dtype) -> PROPERTY_SAMPLE feasible configs the simulator runs fast (any on a GPU),
    or with `every`, every one: within every GPU's 48 KB of shared memory where the family's
    default fits, else within an H100's."""
    def limits(family: str, dtype: str) -> DeviceLimits:
        entry = kernels.family(family)
        return DeviceLimits() if entry.restrict(entry.default, dtype, DeviceLimits()) is None else HOPPER_LIMITS

    return {
        (family, dtype): ([c for c in feasible_configs(family, dtype, limits(family, dtype)) if simulator_friendly(c)]
                          if every else sample_configs(family, dtype, limits(family, dtype), PROPERTY_SAMPLE, seed=1,
                                                       accept=simulator_friendly))
        for family in kernels.FAMILIES
        for dtype in kernels.DTYPES
        if family in families_for(dtype)
    }


#: the builds each family and dtype of the sample runs in: every layout, rows that are 16-byte
#: multiples and rows that are not (kernels.rules.unaligned_for), 32- and 64-bit offsets, each
#: twice across the four
VARIANTS = (("NN", True, 32), ("NT", False, 64), ("TN", True, 64), ("TT", False, 32))
#: shapes whose operands' rows are 16-byte multiples in every layout and dtype, and ones whose are not
ALIGNED_SHAPE, UNALIGNED_SHAPE = (24, 16, 20), (19, 13, 11)


@dataclass(frozen=True)
class Variant:
    family: str
    dtype: str
    config: dict
    layout: str
    offset_bits: int
    shape: tuple[int, int, int]

    @property
    def unaligned(self) -> str:
        return unaligned_for(*self.shape, self.layout, self.dtype)

    @property
    def id(self) -> str:
        return f"{self.family}-{self.dtype}-{self.layout}-{self.offset_bits}-{self.unaligned or 'aligned'}"


def simulated_work(kernel, shape: tuple[int, int, int]) -> int:
    """Threads a launch of `kernel` runs at `shape`: what a simulated launch costs."""
    return math.prod(kernel.grid(shape[0], shape[1], sm_count=2)) * kernel.threads


@functools.cache
def variant_cases() -> tuple[Variant, ...]:
    """Every family and dtype of the sample in each of VARIANTS, each with another of the sample's
    configs that simulate fastest at its shape."""
    cases = []
    for (family, dtype), configs in sorted(property_configs().items()):
        built = [kernels.build(family, config, dtype) for config in configs]
        fastest = {shape: [config for _, config in sorted(zip(built, configs),
                                                          key=lambda pair: simulated_work(pair[0], shape))]
                   for shape in (ALIGNED_SHAPE, UNALIGNED_SHAPE)}
        for index, (layout, aligned, offset_bits) in enumerate(VARIANTS):
            shape = ALIGNED_SHAPE if aligned else UNALIGNED_SHAPE
            config = fastest[shape][index % min(len(VARIANTS), len(configs))]
            cases.append(Variant(family, dtype, config, layout, offset_bits, shape))
    return tuple(cases)
