"""Searching: the objective each trial runs, in this process or in worker processes that share
the study (through its storage) and the GPU (through a file lock held while measuring)."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import optuna
from optuna.trial import TrialState

import kernels
from autotune.errors import InfrastructureFailure, WorkersDied
from autotune.measure.measurement import Measurement
from autotune.space.configs import infeasibility
from autotune.space.encoding import suggest
from autotune.tune.samplers import make_sampler
from autotune.tune.storage import StorageError, open_storage, storage_errors
from autotune.tune.study import INFRASTRUCTURE, OWNER, measured_trials

MEASURING = "measuring"  # user attribute of a trial past its pruning and repeat checks
PROPOSALS_PER_TRIAL = 50  # give up if the sampler keeps proposing infeasible or measured configs
#: trials failed in a row for the machinery's sake (errors.InfrastructureFailure) that stop a search
INFRASTRUCTURE_LIMIT = 3
INFRASTRUCTURE_EXIT = 3  # a worker process's exit status when they stopped it

#: measure(kernel, shape, rng, repeat=..., lock=...) -> Measurement; by default autotune.measure.measurement.measure
#: in an isolated child process; tests pass one that replays recorded results
Measurer = Callable[..., Measurement]


class TrialFailed(Exception):
    """A config that compiled, launched or verified badly: a failed trial, not a failed study."""


@dataclass
class _InfrastructureStreak:
    """Trials of one search process failed in a row for the machinery's sake: each fails without
    counting toward the goal, and the INFRASTRUCTURE_LIMIT-th stops the search, since the next
    would fail alike."""

    study: optuna.Study
    count: int = 0

    def measured(self) -> None:
        self.count = 0

    def failed(self, trial: optuna.Trial, error: InfrastructureFailure) -> Exception:
        """What the trial raises: TrialFailed, and the search goes on, or at the limit the
        InfrastructureFailure that stops it."""
        trial.set_user_attr(INFRASTRUCTURE, str(error)[:1000])
        self.count += 1
        if self.count >= INFRASTRUCTURE_LIMIT:
            return stopped_by_infrastructure(self.study, str(error))
        return TrialFailed(str(error))


def stopped_by_infrastructure(study: optuna.Study, last: str) -> InfrastructureFailure:
    return InfrastructureFailure(
        f"{INFRASTRUCTURE_LIMIT} trials in a row failed for reasons not of their configs (the last: {last}); "
        f"the study keeps its {len(measured_trials(study))} measured trials: fix that and rerun to resume")


@dataclass(frozen=True)
class Search:
    """What a search process needs to rebuild the objective (picklable, for worker processes)."""

    shape: tuple[int, int, int]
    dtype: str
    families: list[str]
    seed: int | None
    limits: object  # DeviceLimits
    measurer: Measurer
    lock: str | None  # a file to lock while measuring, when several processes share the GPU
    layout: str = "NN"  # of the operands (kernels.LAYOUTS)

    def objective(self, study: optuna.Study, goal: int):
        streak = _InfrastructureStreak(study)

        def objective(trial: optuna.Trial) -> float:
            if _goal_in_hand(study, trial, goal):  # the others' trials in flight will reach it
                study.stop()
                raise optuna.TrialPruned("the goal is reached by the trials in flight")
            trial.set_user_attr("owner", OWNER)
            if "CUDA_VISIBLE_DEVICES" in os.environ:
                trial.set_user_attr("gpu", os.environ["CUDA_VISIBLE_DEVICES"])
            config = suggest(trial, self.families, self.dtype)
            reason = infeasibility(config.family, config.params, self.dtype, self.limits)
            if reason:
                trial.set_user_attr("infeasible", reason)
                raise optuna.TrialPruned(reason)
            earlier = _same_params(study, trial)
            if earlier is not None:  # samplers re-propose: answer from the record, don't re-measure
                trial.set_user_attr("repeat_of", earlier.number)
                if earlier.state == TrialState.FAIL:
                    raise TrialFailed(earlier.user_attrs.get("error", "failed before"))
                return earlier.value
            rng = np.random.default_rng([self.seed or 0, trial.number])
            kernel = kernels.build_for(config.family, config.params, self.dtype, self.shape, self.layout)
            trial.set_user_attr(MEASURING, True)
            try:
                value = _measure_trial(trial, self.measurer, kernel, self.shape, rng, self.lock)
            except InfrastructureFailure as error:
                raise streak.failed(trial, error) from None
            except TrialFailed:
                streak.measured()
                raise
            streak.measured()
            return value

        return objective

    def run(self, study: optuna.Study, goal: int, timeout: float | None, callbacks=()) -> None:
        study.optimize(
            self.objective(study, goal),
            n_trials=max(goal - len(measured_trials(study)), 1) * PROPOSALS_PER_TRIAL,
            timeout=timeout,
            catch=(TrialFailed,),
            callbacks=[*callbacks, _StopAt(goal)],
        )


@dataclass(frozen=True)
class StudyRun:
    """Which study a search process works on, and until when: `goal` measured trials, or
    `timeout` seconds."""

    name: str
    spec: str  # the storage (autotune.tune.storage.storage_spec)
    sampler: str
    seed: int | None
    goal: int
    timeout: float | None


def _work(search: Search, run: StudyRun, gpu: int | None = None) -> None:
    """A worker process: its own CUDA context (on `gpu`, if given), the shared study."""
    if gpu is not None:  # before CUDA is initialized in this process (and its measuring child)
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    chosen = make_sampler(run.sampler, run.seed, search.dtype, search.limits)
    try:
        with storage_errors(run.spec):
            study = optuna.load_study(study_name=run.name, storage=open_storage(run.spec), sampler=chosen)
            search.run(study, run.goal, run.timeout)
    except StorageError as error:  # one line (its URL masked), not a worker's traceback
        sys.stderr.write(f"worker {os.getpid()}: {error}\n")
        sys.exit(2)
    except InfrastructureFailure:  # the parent says it, once, from the study
        sys.exit(INFRASTRUCTURE_EXIT)
    finally:
        close_measurer(search.measurer)


def close_measurer(measurer) -> None:
    """Stop the measuring child process of an isolated measurer."""
    close = getattr(measurer, "close", None)
    if close is not None:
        close()


def run_workers(search: Search, run: StudyRun, placement: list, lock_dir, study: optuna.Study, progress) -> None:
    """One worker process per entry of `placement` (a GPU index, or None for the current GPU),
    each seeded apart."""
    context = multiprocessing.get_context("spawn")  # a CUDA context must not be forked
    workers = []
    for i, gpu in enumerate(placement):
        lock = str(lock_dir / ("measure.lock" if gpu is None else f"measure-gpu{gpu}.lock"))
        seeded = replace(run, seed=None if run.seed is None else run.seed + i)
        workers.append(context.Process(target=_work, args=(replace(search, lock=lock), seeded, gpu)))
    for worker in workers:
        worker.start()
    while any(worker.is_alive() for worker in workers):
        time.sleep(0.5)
        progress.show(study)
    progress.show(study)
    if any(w.exitcode == INFRASTRUCTURE_EXIT for w in workers):
        failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
        last = [t.user_attrs[INFRASTRUCTURE] for t in failed if INFRASTRUCTURE in t.user_attrs]
        raise stopped_by_infrastructure(study, last[-1] if last else "unknown")
    crashed = [w.exitcode for w in workers if w.exitcode]
    if crashed:
        raise WorkersDied(f"{len(crashed)} worker process(es) died (exit codes {crashed}); the study keeps their trials")


def _measure_trial(trial, measurer, kernel, shape, rng, lock=None) -> float:
    try:
        result = measurer(kernel, shape, rng, lock=lock)
    except InfrastructureFailure:
        raise
    except Exception as error:  # compile or launch failure: this config's verdict
        trial.set_user_attr("error", f"{type(error).__name__}: {error}"[:1000])
        raise TrialFailed(str(error)) from error
    trial.set_user_attr("compile_s", round(result.compile_s, 3))
    trial.set_user_attr("verify_error", result.verification.error)
    if not result.verification.ok:
        trial.set_user_attr("error", f"wrong result: {result.verification.describe()}")
        raise TrialFailed(result.verification.describe())
    trial.set_user_attr("median_ms", result.timing.median_ms)
    trial.set_user_attr("spread", result.timing.spread)
    return result.gflops


def _goal_in_hand(study: optuna.Study, trial: optuna.Trial, goal: int) -> bool:
    """Whether the measured trials and those other workers are measuring already make `goal`:
    a worker starting one more would only overshoot it."""
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    in_flight = sum(t.number != trial.number and MEASURING in t.user_attrs for t in running)
    return len(measured_trials(study)) + in_flight >= goal


def _same_params(study: optuna.Study, trial: optuna.Trial):
    for earlier in measured_trials(study):
        if earlier.params == trial.params:
            return earlier
    return None


class _StopAt:
    """Stop the study once it holds `goal` measured trials."""

    def __init__(self, goal: int):
        self.goal = goal

    def __call__(self, study: optuna.Study, trial) -> None:
        if len(measured_trials(study)) >= self.goal:
            study.stop()
