"""Searching: the objective each trial runs, in this process or in worker processes that share
the study (through its storage) and the GPU (through a file lock held while measuring)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
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
#: a worker's outcome of one search: it searched, its storage failed, the machinery's failures stopped it
SEARCHED, STORAGE_EXIT, INFRASTRUCTURE_EXIT = 0, 2, 3
CLOSE_TIMEOUT_S = 10  # for workers told to stop, before they are terminated, then killed
STOPPED_EXIT = 143  # a worker terminated while searching

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


def _serve(connection, gpu: int | None) -> None:
    """A worker process: its own CUDA context (on `gpu`, if given) and measurer, kept from one
    search to the next; each search's outcome (SEARCHED, STORAGE_EXIT or INFRASTRUCTURE_EXIT)
    goes back to the parent."""
    if gpu is not None:  # before CUDA is initialized in this process (and its measuring child)
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(STOPPED_EXIT))  # so that `finally` stops the child
    measurer = None
    try:
        while (job := connection.recv()) is not None:
            search, run = job
            if not _same_measurer(measurer, search.measurer):
                close_measurer(measurer)
                measurer = search.measurer
            connection.send(_search_once(replace(search, measurer=measurer), run))
    except EOFError:  # the parent is gone
        pass
    finally:
        close_measurer(measurer)


def _search_once(search: Search, run: StudyRun) -> int:
    chosen = make_sampler(run.sampler, run.seed, search.dtype, search.limits)
    try:
        with storage_errors(run.spec):
            study = optuna.load_study(study_name=run.name, storage=open_storage(run.spec), sampler=chosen)
            search.run(study, run.goal, run.timeout)
    except StorageError as error:  # one line (its URL masked), not a worker's traceback
        sys.stderr.write(f"worker {os.getpid()}: {error}\n")
        return STORAGE_EXIT
    except InfrastructureFailure:  # the parent says it, once, from the study
        return INFRASTRUCTURE_EXIT
    return SEARCHED


def _same_measurer(kept, offered) -> bool:
    """Whether a worker's measurer measures as the one a new search brings (an isolated one then
    keeps its measuring child)."""
    if kept is None or type(kept) is not type(offered):
        return False
    state = getattr(kept, "__getstate__", None)
    return state is not None and state() == offered.__getstate__()


def close_measurer(measurer) -> None:
    """Stop the measuring child process of an isolated measurer."""
    close = getattr(measurer, "close", None)
    if close is not None:
        close()


class Workers:
    """Search processes, one per entry of `placement` (a GPU index, or None for the current GPU),
    each seeded apart, sharing a study and their GPU's measuring lock in `lock_dir`. They are kept
    from one search to the next with their CUDA contexts and measuring children, so the products
    of `mmtune tune --recorded` after the first start searching at once; a worker that died is
    replaced at the next search."""

    def __init__(self, placement: list, lock_dir):
        self.placement, self.lock_dir = list(placement), Path(lock_dir)
        self._workers: list = [None] * len(self.placement)  # (process, connection) each

    def run(self, search: Search, run: StudyRun, study: optuna.Study, progress) -> None:
        """Every worker searches `study` until it holds `run.goal` measured trials (or time is up).
        If this process stops waiting for them (an error, an interrupt), they are stopped, so that
        no search's outcome is read as the next one's."""
        try:
            outcomes = self._search(search, run, study, progress)
        except BaseException:
            self.close()
            raise
        if INFRASTRUCTURE_EXIT in outcomes.values():
            failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
            last = [t.user_attrs[INFRASTRUCTURE] for t in failed if INFRASTRUCTURE in t.user_attrs]
            raise stopped_by_infrastructure(study, last[-1] if last else "unknown")
        crashed = [code for code in outcomes.values() if code != SEARCHED]
        if crashed:
            raise WorkersDied(f"{len(crashed)} worker process(es) died (exit codes {crashed}); the study keeps their "
                              "trials")

    def _search(self, search: Search, run: StudyRun, study: optuna.Study, progress) -> dict[int, int | None]:
        for i, gpu in enumerate(self.placement):
            lock = str(self.lock_dir / ("measure.lock" if gpu is None else f"measure-gpu{gpu}.lock"))
            seeded = replace(run, seed=None if run.seed is None else run.seed + i)
            self._connection(i).send((replace(search, lock=lock), seeded))
        outcomes: dict[int, int | None] = {}
        while len(outcomes) < len(self.placement):
            time.sleep(0.5)
            progress.show(study)
            for i in set(range(len(self.placement))) - set(outcomes):
                outcome = self._outcome(i)
                if outcome is not False:
                    outcomes[i] = outcome
        progress.show(study)
        return outcomes

    def _connection(self, i: int):
        found = self._workers[i]
        if found is None or not found[0].is_alive():
            context = multiprocessing.get_context("spawn")  # a CUDA context must not be forked
            ours, theirs = context.Pipe()
            # not a daemon: a worker starts measuring children of its own (close() stops it)
            process = context.Process(target=_serve, args=(theirs, self.placement[i]))
            process.start()
            theirs.close()
            found = self._workers[i] = (process, ours)
        return found[1]

    def _outcome(self, i: int):
        """Worker i's outcome of its search; its exit code if it died; False while it searches."""
        process, connection = self._workers[i]
        try:
            if connection.poll():
                return connection.recv()
        except (EOFError, OSError):
            pass
        if process.is_alive():
            return False
        process.join()
        self._workers[i] = None
        return process.exitcode

    def close(self) -> None:
        """Stop every worker (each stops its measuring child); kill those still busy after 10 s."""
        found = [worker for worker in self._workers if worker is not None]
        for _, connection in found:
            try:
                connection.send(None)
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for process, _ in found:
            process.join(max(deadline - time.monotonic(), 0))
            if process.is_alive():  # busy in a search: SIGTERM lets it stop its measuring child first
                process.terminate()
                process.join(CLOSE_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()
        self._workers = [None] * len(self.placement)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
