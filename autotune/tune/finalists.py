"""The end of a tune: the best distinct configs re-timed with more launches; the fastest wins.

Each finalist's result is kept in the study (a user attribute per config, with the source hash it
was measured on) as soon as it is measured, so a tune killed while re-timing picks up where it
stopped: a rerun re-times only the finalists without a result for today's code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import optuna
from optuna.trial import TrialState

import kernels
from autotune.backends import Device
from autotune.errors import InfrastructureFailure
from autotune.measure.measurement import versions
from autotune.space.encoding import config_of
from autotune.space.problem import Problem
from autotune.store.rows import Row
from kernels.contract import Config

FINALISTS = 3
FINAL_LAUNCHES = 50
ATTR_PREFIX = "final:"


def finalists(study: optuna.Study, count: int = FINALISTS) -> list[Config]:
    """The `count` fastest distinct configs of the study's complete trials."""
    done = sorted(
        (t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None),
        key=lambda t: t.value, reverse=True,
    )
    chosen: list[Config] = []
    for trial in done:
        config = config_of(trial.params)
        if config not in chosen:
            chosen.append(config)
        if len(chosen) == count:
            break
    return chosen


def pending(study: optuna.Study) -> list[Config]:
    """Finalists still to re-time on today's code."""
    return [c for c in finalists(study) if _result(study, c) is None]


@dataclass(frozen=True)
class Retiming:
    """Where finalists are re-timed: the study, the problem, a file to lock while timing, and
    what to call after each."""

    study: optuna.Study
    problem: Problem
    lock: str | None = None
    on_done: Callable[[], None] | None = None


def retime(retiming: Retiming, measurer, seed: int | None) -> None:
    """Re-time every pending finalist, one after the other in `measurer` (on a GPU each
    finalist's build is in the kernel store since its trial: nothing to compile in parallel),
    holding the lock while timing; each result is kept in the study as it comes."""
    study = retiming.study
    trials = len(study.get_trials(deepcopy=False))
    for i, config in enumerate(pending(study)):
        _retime_one(retiming, config, measurer, np.random.default_rng([seed or 0, trials, 1, i]))


def _retime_one(retiming: Retiming, config: Config, measurer, rng) -> None:
    study, problem = retiming.study, retiming.problem
    try:
        kernel = kernels.build_for(config.family, config.params, problem.dtype, problem.shape, problem.layout)
        result = measurer(kernel, problem.shape, rng, repeat=FINAL_LAUNCHES, lock=retiming.lock)
        record = {"ok": result.verification.ok}
        if result.verification.ok:
            record.update(gflops=result.gflops, median_ms=result.timing.median_ms, spread=result.timing.spread)
    except InfrastructureFailure:  # not the config's fault: a rerun re-times it
        raise
    except Exception as error:  # it ran in its trial; if it cannot now, it cannot win
        record = {"ok": False, "error": f"{type(error).__name__}: {error}"[:500]}
    record["source_hash"] = kernels.source_hash(config.family)
    study.set_user_attr(ATTR_PREFIX + config.key, record)
    if retiming.on_done is not None:
        retiming.on_done()


def winner_row(study: optuna.Study, problem: Problem, device: Device) -> Row | None:
    """The cache row of the fastest re-timed finalist, or None if none verified."""
    timed = [(config, _result(study, config)) for config in finalists(study)]
    timed = [(config, result) for config, result in timed if result and result["ok"]]
    if not timed:
        return None
    config, result = max(timed, key=lambda entry: entry[1]["gflops"])
    toolchain = versions()
    return Row(
        device=device.name, cc=device.cc, sm_count=device.sm_count, driver=device.driver, dtype=problem.dtype,
        m=problem.m, n=problem.n, k=problem.k, layout=problem.layout, family=config.family, params=config.params,
        precision=kernels.family(config.family).precision, gflops=result["gflops"], median_ms=result["median_ms"],
        spread=result["spread"], numba=toolchain["numba"], numba_cuda=toolchain["numba_cuda"],
        source_hash=result["source_hash"],
    )


def _result(study: optuna.Study, config: Config) -> dict | None:
    """The finalist's kept result, if it was measured on today's code."""
    record = study.user_attrs.get(ATTR_PREFIX + config.key)
    if record is None or record.get("source_hash") != kernels.source_hash(config.family):
        return None
    return record
