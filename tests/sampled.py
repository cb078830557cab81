"""Kernel configs the property tests draw from (tests/test_kernels.py, tests/test_runtime.py):
sampled with a fixed seed from each family's feasible space per dtype, or, for the sweep that
`python -m pytest -m sweep` runs, every feasible config (seconds to enumerate)."""

import functools

from conftest import ON_GPU

import kernels
from autotune.space import DeviceLimits, families_for, feasible_configs, sample_configs

#: configs sampled per family and dtype
PROPERTY_SAMPLE = 24


def simulator_friendly(config: dict) -> bool:
    """Few threads and barriers per launch, so one example costs about a second in the simulator."""
    if ON_GPU:
        return True
    if "warps_m" in config:  # each mma meets the block's threads at a barrier in the simulator
        return config["warps_m"] * config["warps_n"] <= 2 and config["bm"] * config["bn"] <= 32 * 64
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
    or with `every`, every one."""
    limits = DeviceLimits()
    return {
        (family, dtype): ([c for c in feasible_configs(family, dtype, limits) if simulator_friendly(c)] if every else
                          sample_configs(family, dtype, limits, PROPERTY_SAMPLE, seed=1, accept=simulator_friendly))
        for family in kernels.FAMILIES
        for dtype in kernels.DTYPES
        if family in families_for(dtype)
    }
