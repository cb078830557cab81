"""The Optuna study: suggest -> build -> verify -> time -> record.

One study per (device, dtype, M, N, K), kept in Optuna storage so a rerun resumes it. A config
the restriction rejects is pruned without compiling; one that fails to compile, launch or verify
is a failed trial with its reason in the study (user attribute "error") and never reaches the
cache. At the end the top configs are re-timed with more launches and the winner is written to
the cache, which keeps it only if it beats the row already there.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import optuna
from optuna.trial import TrialState

import kernels
from autotune.cache import Cache, nearest_rows, shipped_rows
from autotune.isolation import Isolated
from autotune.measure import Measurement, device_info, exclusive, measure, versions
from autotune.samplers import SamplerError, make_sampler
from autotune.space import (
    FAMILY_NAMES,
    config_of,
    default_config,
    device_limits,
    distributions,
    feasible_configs,
    infeasibility,
    suggest,
    trial_params,
)

WARM_START_SHAPES = 3
#: the order the families' defaults are tried in: every shape tuned on the H200 so far was won by
#: vector or splitk (studies/h200/records.json), never by register, shared or naive
FIRST_GUESSES = ("vector", "splitk", "register", "shared", "naive")
FINALISTS = 3
FINAL_LAUNCHES = 50
MEASURED = (TrialState.COMPLETE, TrialState.FAIL)
PROPOSALS_PER_TRIAL = 50  # give up if the sampler keeps proposing infeasible or measured configs
_OWNER = f"{socket.gethostname()}:{os.getpid()}"  # who runs a trial: to tell abandoned ones


#: measure(kernel, m, n, k, rng, repeat=..., lock=...) -> Measurement; by default autotune.measure.measure
#: in an isolated child process; tests pass one that replays recorded results
Measurer = Callable[..., Measurement]


class TrialFailed(Exception):
    """A config that compiled, launched or verified badly: a failed trial, not a failed study."""


class TuneError(ValueError):
    """The tuning request itself is wrong."""


@dataclass
class TuneResult:
    row: dict | None  # the winner as written to (or offered to) the cache; None if nothing verified
    written: bool  # False when the cache already held a faster row for this key
    study_name: str
    storage: str
    trials: int  # measured trials in the study, this run's and earlier ones
    new_trials: int
    failed: int
    wall_s: float


def study_name(device: str, dtype: str, m: int, n: int, k: int) -> str:
    return f"mmtune:{device}:{dtype}:{m}x{n}x{k}"


def storage_spec(storage: str | None, cache: Cache) -> str:
    """An Optuna storage URL as given, or by default the path of a journal file beside the cache:
    Optuna recommends journal storage over SQLite when several processes share a study."""
    return storage or str(cache.path.parent / "studies.journal")


def open_storage(spec: str):
    if "://" in spec:
        return spec
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(spec))


@dataclass(frozen=True)
class _Search:
    """What a search process needs to rebuild the objective (picklable, for worker processes)."""

    shape: tuple[int, int, int]
    dtype: str
    families: list[str]
    seed: int | None
    limits: object  # DeviceLimits
    measurer: Measurer
    lock: str | None  # a file to lock while measuring, when several processes share the GPU

    def objective(self, study: optuna.Study):
        def objective(trial: optuna.Trial) -> float:
            trial.set_user_attr("owner", _OWNER)
            if "CUDA_VISIBLE_DEVICES" in os.environ:
                trial.set_user_attr("gpu", os.environ["CUDA_VISIBLE_DEVICES"])
            family, config = suggest(trial, self.families, self.dtype)
            reason = infeasibility(family, config, self.dtype, self.limits)
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
            kernel = kernels.build(family, config, self.dtype)
            return _measure_trial(trial, self.measurer, kernel, self.shape, rng, self.lock)

        return objective

    def run(self, study: optuna.Study, goal: int, timeout: float | None, callbacks=()) -> None:
        study.optimize(
            self.objective(study),
            n_trials=max(goal - len(measured_trials(study)), 1) * PROPOSALS_PER_TRIAL,
            timeout=timeout,
            catch=(TrialFailed,),
            callbacks=[*callbacks, _StopAt(goal)],
        )


def _work(search: _Search, name: str, spec: str, sampler: str, seed: int | None, goal: int, timeout,
          gpu: int | None = None) -> None:
    """A worker process: its own CUDA context (on `gpu`, if given), the shared study."""
    if gpu is not None:  # before CUDA is initialized in this process (and its measuring child)
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    chosen = make_sampler(sampler, seed, search.dtype, search.limits)
    study = optuna.load_study(study_name=name, storage=open_storage(spec), sampler=chosen)
    try:
        search.run(study, goal, timeout)
    finally:
        _close(search.measurer)


def _close(measurer) -> None:
    """Stop the measuring child process of an isolated measurer."""
    close = getattr(measurer, "close", None)
    if close is not None:
        close()


def tune(
    m: int,
    n: int,
    k: int,
    dtype: str = "float32",
    trials: int = 40,
    timeout: float | None = None,
    families: list[str] | None = None,
    sampler: str = "climb",
    storage: str | None = None,
    seed: int | None = 0,
    cache_path: Path | str | None = None,
    show_progress: bool = True,
    measurer: Measurer | None = None,
    jobs: int = 1,
    trial_timeout: float = 300.0,
    gpus: list[int] | None = None,
) -> TuneResult:
    """Run or resume the study for (this device, dtype, M, N, K) until it holds `trials` measured
    trials (or `timeout` seconds pass), then re-time the best and write the winner to the cache.
    With jobs > 1, that many worker processes share the study and the GPU: they compile in
    parallel and measure one at a time. With `gpus`, `jobs` workers run on each of those GPUs
    (of one model), each GPU with its own measuring lock. By default each trial is measured in a child process
    (autotune.isolation), so a kernel that faults or runs past `trial_timeout` seconds fails its
    trial and nothing else."""
    families = list(families or FAMILY_NAMES)
    _check_request(m, n, k, dtype, trials, jobs, trial_timeout, gpus, families)
    started = time.perf_counter()
    if measurer is None:
        measurer = Isolated(measure, trial_timeout)
    info = device_info()
    limits = device_limits()
    cache = Cache(cache_path)
    spec = storage_spec(storage, cache)
    name = study_name(info["device"], dtype, m, n, k)
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # failed trials are reported by us
    try:
        storage_obj = open_storage(spec)
        try:
            chosen = make_sampler(sampler, seed, dtype, limits)
        except SamplerError as error:
            raise TuneError(str(error)) from None
        study = open_study(storage_obj, spec, name, chosen, cache, info["device"], dtype, (m, n, k), families, limits)
        before = len(measured_trials(study))
        goal = min(trials, sum(len(feasible_configs(f, dtype, limits)) for f in families))

        search = _Search((m, n, k), dtype, families, seed, limits, measurer, None)
        if before < goal:
            with _Progress(show_progress, before, goal, timeout) as progress:
                if jobs == 1 and not gpus:
                    search.run(study, goal, timeout, [progress.update])
                else:
                    placement = [gpu for gpu in (gpus or [None]) for _ in range(jobs)]
                    _run_workers(search, placement, cache.path.parent, name, spec, sampler, seed, goal, timeout,
                                 study, progress)
        row = _finalists_row(study, measurer, (m, n, k), dtype, info, seed)
    finally:
        optuna.logging.set_verbosity(verbosity)
        _close(measurer)
    measured = measured_trials(study)
    written = False
    if row is not None:
        row.update(trials=len(measured), study=name)
        written = cache.record(row)
        _keep_kernel(cache.get(row["device"], dtype, m, n, k) or row)
    return TuneResult(
        row=row, written=written, study_name=name, storage=spec, trials=len(measured),
        new_trials=len(measured) - before, failed=sum(t.state == TrialState.FAIL for t in measured),
        wall_s=time.perf_counter() - started,
    )


def _keep_kernel(row: dict) -> None:
    """Compile the cache's kernel for this shape into the kernel store (autotune.store), so that a
    fresh process launches it without compiling; a failure there does not fail the tune."""
    from autotune import store

    try:
        store.keep(row)
    except (store.StoreError, OSError, ValueError) as error:
        warnings.warn(f"mmtune: the kernel was not kept in the kernel store: {error}", stacklevel=2)


def _check_request(m, n, k, dtype, trials, jobs, trial_timeout, gpus, families) -> None:
    if min(m, n, k) < 1:
        raise TuneError(f"M, N and K must be positive, got {m}x{n}x{k}")
    if dtype not in kernels.DTYPES:
        raise TuneError(f"unsupported dtype {dtype!r}; supported: {', '.join(kernels.DTYPES)}")
    if trials < 1:
        raise TuneError("--trials must be at least 1")
    if jobs < 1:
        raise TuneError("--jobs must be at least 1")
    if gpus is not None and (not gpus or min(gpus) < 0 or len(set(gpus)) != len(gpus)):
        raise TuneError(f"--gpus needs distinct GPU indices, got {gpus}")
    if trial_timeout <= 0:
        raise TuneError("--trial-timeout must be positive")
    unknown = [f for f in families if f not in FAMILY_NAMES]
    if unknown:
        raise TuneError(f"unknown kernel family {unknown[0]!r}; known: {', '.join(FAMILY_NAMES)}")


def open_study(storage, spec: str, name: str, sampler, cache: Cache, device: str, dtype: str, shape, families,
               limits) -> optuna.Study:
    """Create or resume the study; a new one is warm-started. Tuners started together on one
    shape take turns here (a file lock beside the cache): Optuna's enqueue_trial may queue a
    config twice when processes call it at the same time."""
    with exclusive(str(cache.path.parent / "study-setup.lock")):
        study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="maximize",
                                    load_if_exists=True)
        _check_space(study, families, spec)
        fail_abandoned_trials(study, optuna.storages.get_storage(storage))
        if not study.trials:
            study.set_user_attr("shape", list(shape))
            study.set_user_attr("dtype", dtype)
            _warm_start(study, cache, device, dtype, shape, families, limits)
    return study


def _check_space(study: optuna.Study, families: list[str], spec: str) -> None:
    """Refuse to resume a study searched over another space: Optuna cannot mix them. A trial that
    another worker is running may hold only the parameters suggested so far."""
    expected = distributions(families)
    for trial in study.get_trials(deepcopy=False):
        family = trial.params.get("family")
        if family is None:  # waiting in the queue, or failed before its first suggestion
            continue
        wanted = {"family"} | {name for name in expected if name.startswith(f"{family}.")}
        names = set(trial.distributions)
        complete = names <= wanted if trial.state == TrialState.RUNNING else names == wanted
        if not complete or any(expected.get(n) != d for n, d in trial.distributions.items()):
            raise TuneError(
                f"study {study.study_name!r} in {spec} was searched over another space (other --family "
                f"options or their order, or the kernels of an older mmtune); resume it with the same "
                f"families, or start afresh with --storage PATH"
            )


def measured_trials(study: optuna.Study) -> list:
    """Trials that ran a config for the first time (complete or failed): what --trials counts."""
    return [
        t for t in study.get_trials(deepcopy=False, states=MEASURED)
        if "repeat_of" not in t.user_attrs and "abandoned" not in t.user_attrs
    ]


def fail_abandoned_trials(study: optuna.Study, storage) -> int:
    """Mark FAIL the RUNNING trials whose process on this host has ended (killed, say): journal
    storage has no heartbeat to do it. Returns how many."""
    host = socket.gethostname()
    abandoned = 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner_host, _, pid = trial.user_attrs.get("owner", "").rpartition(":")
        if owner_host == host and pid.isdigit() and not _alive(int(pid)):
            storage.set_trial_user_attr(trial._trial_id, "abandoned", f"process {pid} ended during the trial")
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            abandoned += 1
    return abandoned


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


def _warm_start(study, cache, device, dtype, shape, families, limits) -> None:
    """Enqueue the bests of the nearest tuned shapes (cached, then shipped), then the built-in
    default config of each family searched, in FIRST_GUESSES order. Workers starting together
    climb from the first queued config (autotune.samplers), so it should be the best guess."""
    tuned = cache.nearest(device, dtype, *shape, WARM_START_SHAPES)
    tuned += nearest_rows(shipped_rows(device, dtype), shape, WARM_START_SHAPES)
    candidates = [(row["family"], row["params"]) for _, row in tuned]
    candidates += [(f, default_config(f)) for f in sorted(families, key=FIRST_GUESSES.index)]
    for family, config in candidates:
        if family in families and infeasibility(family, config, dtype, limits) is None:
            study.enqueue_trial(trial_params(family, config), skip_if_exists=True)


def _run_workers(search, placement, lock_dir, name, spec, sampler, seed, goal, timeout, study, progress) -> None:
    """One worker process per entry of `placement` (a GPU index, or None for the current GPU)."""
    context = multiprocessing.get_context("spawn")  # a CUDA context must not be forked
    workers = []
    for i, gpu in enumerate(placement):
        lock = str(lock_dir / ("measure.lock" if gpu is None else f"measure-gpu{gpu}.lock"))
        args = (replace(search, lock=lock), name, spec, sampler, None if seed is None else seed + i, goal, timeout, gpu)
        workers.append(context.Process(target=_work, args=args))
    for worker in workers:
        worker.start()
    while any(worker.is_alive() for worker in workers):
        time.sleep(0.5)
        progress.show(study)
    progress.show(study)
    crashed = [w.exitcode for w in workers if w.exitcode]
    if crashed:
        raise TuneError(f"{len(crashed)} worker process(es) died (exit codes {crashed}); the study keeps their trials")


def _measure_trial(trial, measurer, kernel, shape, rng, lock=None) -> float:
    try:
        result = measurer(kernel, *shape, rng, lock=lock)
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


def _finalists_row(study, measurer, shape, dtype, info, seed) -> dict | None:
    """Re-time the best distinct configs with FINAL_LAUNCHES launches each; the fastest wins."""
    done = sorted(
        (t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None),
        key=lambda t: t.value, reverse=True,
    )
    finalists, seen = [], set()
    for trial in done:
        family, config = config_of(trial.params)
        key = (family, tuple(sorted(config.items())))
        if key not in seen:
            seen.add(key)
            finalists.append((family, config))
        if len(finalists) == FINALISTS:
            break
    best = None
    rng = np.random.default_rng([seed or 0, len(study.trials), 1])
    for family, config in finalists:
        try:
            result = measurer(kernels.build(family, config, dtype), *shape, rng, repeat=FINAL_LAUNCHES)
        except Exception:  # it ran in its trial; if it cannot now, it cannot win
            continue
        if result.verification.ok and (best is None or result.gflops > best[2].gflops):
            best = (family, config, result)
    if best is None:
        return None
    family, config, result = best
    return {
        "device": info["device"], "dtype": dtype, "m": shape[0], "n": shape[1], "k": shape[2],
        "family": family, "params": config, "gflops": result.gflops,
        "median_ms": result.timing.median_ms, "spread": result.timing.spread,
        "cc": info["cc"], "driver": info["driver"], **{k: v for k, v in versions().items() if k != "python"},
        "source_hash": kernels.source_hash(family),
    }


class _Progress:
    """Rich progress: measured trials, the last and best GFLOPS, failures, time left."""

    def __init__(self, enabled: bool, done: int, total: int, timeout: float | None):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("tuning"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
            TextColumn("{task.fields[status]}"), disable=not enabled,
        )
        self.task = self.progress.add_task("tune", total=total, completed=done, status="")
        self.deadline = time.monotonic() + timeout if timeout else None

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def update(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """After each trial of this process."""
        if trial.state in MEASURED and "repeat_of" not in trial.user_attrs:
            self.show(study)

    def show(self, study: optuna.Study) -> None:
        """Read the study (also what worker processes wrote) and redraw."""
        measured = measured_trials(study)
        done = [t for t in measured if t.state == TrialState.COMPLETE]
        best = max((t.value for t in done), default=0.0)
        last = f"{done[-1].value:,.4g}" if done else "-"
        status = f"last {last}  best {best:,.4g} GFLOPS  failed {len(measured) - len(done)}"
        if self.deadline:
            status += f"  timeout in {max(0, self.deadline - time.monotonic()):.0f}s"
        self.progress.update(self.task, completed=len(measured), status=status)
