"""Compile-only checks: build a config for a target architecture on the CPU and read the
resources it really uses (registers, shared memory, spills).
"""

from __future__ import annotations

from dataclasses import dataclass

import kernels
from kernels.contract import DeviceLimits


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
            results.append(CompileCheck(family=family, config=config, dtype=dtype, resources=None,
                                        error=f"{type(error).__name__}: {error}"))
            continue
        problem = resources.problem(kernel.threads, limits)
        results.append(CompileCheck(family=family, config=config, dtype=dtype, resources=resources.as_dict(),
                                    error=problem))
    return results
