"""Tuning one shape: search (autotune.tune.workers) an Optuna study (autotune.tune.study), re-time the
finalists (autotune.tune.finalists) and write the winner to the cache.

A config the restriction rejects is pruned without compiling; one that fails to compile, launch or
verify is a failed trial with its reason in the study (user attribute "error") and never reaches
the cache. The cache keeps the winner only if it beats the row already there (or that row was
measured on older kernel code).
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import optuna

import kernels
from autotune import backends
from autotune.errors import StoreError, TuneError
from autotune.measure.isolation import Isolated
from autotune.measure.measurement import measure
from autotune.space.configs import FAMILY_NAMES, device_limits, families_for, feasible_count, runs_on
from autotune.space.precision import MIN_K, PRECISIONS
from autotune.space.precision import resolve as resolve_precision
from autotune.space.problem import Problem
from autotune.store.cache import Cache
from autotune.store.rows import Row
from autotune.tune import finalists
from autotune.tune.fleet import offer_winner
from autotune.tune.progress import Progress
from autotune.tune.samplers import SamplerError, make_sampler
from autotune.tune.storage import masked, open_storage, storage_errors, storage_spec
from autotune.tune.study import SpaceMismatch, WarmStart, measured_trials, open_study, study_name
from autotune.tune.workers import Measurer, Search, StudyRun, Workers, WorkersDied, close_measurer

MAX_DEFAULT_JOBS = 16  # each worker holds a CUDA context and a measuring child with another
#: host memory a worker process and its measuring child take together: each imports numba, optuna
#: and the kernels (about 0.15 GiB), holds a CUDA context (a few hundred MiB of host memory) and
#: compiles with NVVM (up to about 0.5 GiB for a large kernel); 2 GiB for the pair leaves room
WORKER_MEMORY = 2 * 2**30


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def available_memory() -> int:
    """Bytes of host memory that processes can still take without swapping (MemAvailable)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def memory_jobs() -> int:
    """The worker processes that the free host memory holds, WORKER_MEMORY each; at least 1."""
    return max(1, available_memory() // WORKER_MEMORY)


def default_jobs(places: int = 1) -> int:
    """Worker processes by default on each of `places` GPUs: their share of the CPU cores this
    process may use and of the workers memory holds, capped."""
    return max(1, min(usable_cores() // places, memory_jobs() // places, MAX_DEFAULT_JOBS))


def size(nbytes: float) -> str:
    """Bytes in binary units, for messages: '3.2 GiB'."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024 or unit == "TiB":
            return f"{nbytes:.3g} {unit}" if unit != "bytes" else f"{nbytes:.0f} bytes"
        nbytes /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class TuneRequest:
    """What to tune and how hard: the options of `mmtune tune`."""

    m: int
    n: int
    k: int
    dtype: str = "float32"
    trials: int = 40
    timeout: float | None = None
    #: the kernel families searched; None: every family that multiplies `dtype` on the GPU
    #: (families_on)
    families: list[str] | None = None
    sampler: str = "climb"
    storage: str | None = None
    seed: int | None = 0
    #: worker processes on each GPU; None: default_jobs for the GPUs asked for
    jobs: int | None = None
    trial_timeout: float = 300.0
    gpus: list[int] | None = None
    #: how A and B are stored (kernels.LAYOUTS): "TN" tunes for A passed as the transpose of a
    #: C-contiguous K x M array
    layout: str = "NN"
    #: the precision searched (autotune.space.precision): families of it or of a stricter one; None:
    #: the default for the dtype and GPU
    precision: str | None = None

    def __post_init__(self) -> None:
        if self.jobs is None:
            object.__setattr__(self, "jobs", default_jobs(len(self.gpus) if self.gpus else 1))

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.m, self.n, self.k

    def check(self) -> None:
        if min(self.shape) < 1:
            raise TuneError(f"M, N and K must be positive, got {self.m}x{self.n}x{self.k}")
        if self.dtype not in kernels.DTYPES:
            raise TuneError(f"unsupported dtype {self.dtype!r}; supported: {', '.join(kernels.DTYPES)}")
        if self.trials < 1:
            raise TuneError("--trials must be at least 1")
        if self.timeout is not None and self.timeout <= 0:
            raise TuneError(f"--timeout must be a positive number of seconds, got {self.timeout:g}")
        if self.jobs < 1:
            raise TuneError("--jobs must be at least 1")
        if self.gpus is not None and (not self.gpus or min(self.gpus) < 0 or len(set(self.gpus)) != len(self.gpus)):
            raise TuneError(f"--gpus needs distinct GPU indices, got {self.gpus}")
        self.check_workers()
        if self.trial_timeout <= 0:
            raise TuneError("--trial-timeout must be positive")
        if self.layout not in kernels.LAYOUTS:
            raise TuneError(f"unknown layout {self.layout!r}; known: {', '.join(kernels.LAYOUTS)}")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise TuneError(f"unknown precision {self.precision!r}; known: {', '.join(PRECISIONS)}")
        unknown = [f for f in self.families or [] if f not in FAMILY_NAMES]
        if unknown:
            raise TuneError(f"unknown kernel family {unknown[0]!r}; known: {', '.join(FAMILY_NAMES)}")
        other = [f for f in self.families or [] if f not in families_for(self.dtype)]
        if other:
            raise TuneError(f"{other[0]} kernels do not multiply {self.dtype}; those that do: "
                            f"{', '.join(families_for(self.dtype))}")

    def check_workers(self) -> None:
        """Refuse, before any starts, more worker processes than the usable CPU cores or the
        free host memory (WORKER_MEMORY each) hold: they would only slow each other or swap."""
        places = len(self.gpus or [None])
        workers = self.jobs * places
        each = f" on each of {places} GPUs" if places > 1 else ""
        cores, memory = usable_cores(), available_memory()
        if workers > cores:
            raise TuneError(f"--jobs {self.jobs}{each} makes {workers} worker processes, more than the {cores} CPU "
                            f"cores this process may use; give --jobs {max(cores // places, 1)} or fewer")
        if workers > memory_jobs():
            raise TuneError(f"--jobs {self.jobs}{each} makes {workers} worker processes, which need about "
                            f"{size(workers * WORKER_MEMORY)} of host memory ({size(WORKER_MEMORY)} each); "
                            f"{size(memory)} is available: give --jobs {max(memory_jobs() // places, 1)} or fewer")

    def check_fits(self) -> None:
        """Refuse operands that cannot fit the GPU's free memory, or the host's (which holds them
        too, to draw and verify them), before any trial."""
        itemsize = np.dtype(self.dtype).itemsize
        needed = (self.m * self.k + self.k * self.n + self.m * self.n) * itemsize
        product = f"a {self.m}x{self.n}x{self.k} {self.dtype} product"
        for where, free in (("GPU", backends.current().free_memory()), ("host", available_memory())):
            if needed > free:
                raise TuneError(f"the operands of {product} need {size(needed)} ({needed} bytes) of {where} memory; "
                                f"{size(free)} ({free:.0f} bytes) is available: tune a smaller shape")

    def precision_on(self, cc: str | None) -> str:
        """The precision searched on a GPU of compute capability `cc`: the one asked for, or the
        default (autotune.space.precision.default)."""
        return resolve_precision(self.precision, self.dtype, cc)

    def families_on(self, cc: str | None) -> list[str]:
        """The families searched on a GPU of compute capability `cc`: those asked for, or every
        family that multiplies the dtype there for M rows in the precision searched, at K
        (autotune.space.configs.families_for). Asking for a family whose instructions the GPU lacks (autotune.space.configs.runs_on),
        or whose precision the one searched does not allow (at K: autotune.space.precision.MIN_K), is a
        TuneError."""
        precision = self.precision_on(cc)
        if self.families is None:
            return families_for(self.dtype, cc, self.m, precision, self.k)
        missing = [f for f in self.families if not runs_on(f, self.dtype, cc)]
        if missing:
            raise TuneError(f"this GPU (compute capability {cc}) lacks instructions that {self.dtype} kernels of "
                            f"{', '.join(missing)} need")
        stricter = [f for f in self.families if f not in families_for(self.dtype, precision=precision)]
        if stricter:
            raise TuneError(f"{stricter[0]} kernels compute in {kernels.family(stricter[0]).precision} precision, "
                            f"which --precision {precision} does not allow")
        short = [f for f in self.families if f not in families_for(self.dtype, precision=precision, k=self.k)]
        if short:
            raise TuneError(f"{short[0]} kernels serve products of at least {MIN_K[kernels.family(short[0]).precision]} "
                            f"terms, not K = {self.k}: there the tensor cores' error exceeds cuBLAS's")
        return list(self.families)

    def study_precision(self, cc: str | None) -> str | None:
        """The precision a study's name carries where the one searched leaves out families that
        multiply the dtype on this GPU: the strictest that searches the same families (at a K under
        autotune.space.precision.MIN_K, "tf32x3" searches "ieee"'s, and shares its study); else None
        (names as before precisions existed)."""
        searched = families_for(self.dtype, cc, self.m, self.precision_on(cc), self.k)
        if searched == families_for(self.dtype, cc, self.m):
            return None
        return next(p for p in PRECISIONS if families_for(self.dtype, cc, self.m, p, self.k) == searched)


@dataclass
class TuneResult:
    row: Row | None  # the winner as written to (or offered to) the cache; None if nothing verified
    written: bool  # False when the cache already held a faster row for this key
    study_name: str
    storage: str
    trials: int  # measured trials in the study, this run's and earlier ones
    new_trials: int
    failed: int
    wall_s: float


def tune(request: TuneRequest, measurer: Measurer | None = None, cache_path: Path | str | None = None,
         show_progress: bool = True, workers: Workers | None = None) -> TuneResult:
    """Run or resume the study for (this device, dtype, M, N, K, layout) until it holds `trials` measured
    trials (or `timeout` seconds pass), then re-time the best and write the winner to the cache.
    With jobs > 1, that many worker processes share the study and the GPU: they compile in
    parallel and measure one at a time. With `gpus`, `jobs` workers run on each of those GPUs (of
    one model), each GPU with its own measuring lock. By default each trial is measured in a child
    process (autotune.measure.isolation), so a kernel that faults or runs past `trial_timeout` seconds
    fails its trial and nothing else. A storage server lost on the way is one StorageError; a
    rerun resumes the study. `workers` (placed as `placement` says) are kept by the caller for
    several tunes; by default the workers start here and stop at the end. A measurer passed in is
    the caller's to close."""
    with storage_errors(request.storage or ""):
        return _tune(request, measurer, cache_path, show_progress, workers)


def isolated_measurer(request: TuneRequest) -> Isolated:
    """The default measurer: each trial in a child process, failed after `trial_timeout` seconds."""
    return Isolated(measure, request.trial_timeout)


def placement(request: TuneRequest) -> list[int | None]:
    """Where a tune's worker processes run: `jobs` on each GPU asked for, or on the current one;
    none (the search runs in this process) for one job on the current GPU."""
    if request.jobs == 1 and not request.gpus:
        return []
    return [gpu for gpu in (request.gpus or [None]) for _ in range(request.jobs)]


def _tune(request: TuneRequest, measurer: Measurer | None, cache_path: Path | str | None,
          show_progress: bool, workers: Workers | None) -> TuneResult:
    request.check()
    backends.require_gpu()
    request.check_fits()
    started = time.perf_counter()
    device, limits, cache = backends.current().device(), device_limits(), Cache(cache_path)
    cache.check_writable()  # before the search whose end is a write
    ours = measurer is None
    measurer = measurer or isolated_measurer(request)
    request = replace(request, families=request.families_on(device.cc), precision=request.precision_on(device.cc))
    problem = Problem(device=device.name, dtype=request.dtype, m=request.m, n=request.n, k=request.k,
                      layout=request.layout, precision=request.precision)
    spec = storage_spec(request.storage, cache)
    carried = request.study_precision(device.cc)
    name = study_name(replace(problem, precision=carried or problem.precision), narrowed=carried is not None)
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # failed trials are reported by us
    try:
        try:
            sampler = make_sampler(request.sampler, request.seed, request.dtype, limits)
            start = WarmStart(problem=problem, gpu=device, families=request.families, limits=limits)
            study = open_study(open_storage(spec), spec, name, sampler, cache, start)
        except (SamplerError, SpaceMismatch) as error:
            raise TuneError(str(error)) from None
        before = len(measured_trials(study))
        goal = feasible_count(request.families, request.dtype, limits, request.trials)
        run = StudyRun(name=name, spec=spec, sampler=request.sampler, seed=request.seed, goal=goal,
                       timeout=request.timeout)
        with Progress(enabled=show_progress, done=before, total=run.goal, timeout=request.timeout,
                      finalists=finalists.FINALISTS) as progress:
            if before < run.goal:
                if request.jobs > 1 or request.gpus:
                    getattr(measurer, "start", lambda: None)()  # ready for the finalists when the workers end
                search = Search(shape=request.shape, dtype=request.dtype, families=request.families, seed=request.seed,
                                limits=limits, measurer=measurer, lock=None, layout=request.layout)
                with nullcontext(workers) if workers else Workers(placement(request), cache.path.parent) as used:
                    _search(request, search, run, study, progress, used)
            lock = str(cache.path.parent / "measure.lock")
            finalists.retime(finalists.Retiming(study, problem, lock, progress.retiming), measurer, request.seed)
        row = finalists.winner_row(study, problem, device)
    finally:
        optuna.logging.set_verbosity(verbosity)
        if ours:
            close_measurer(measurer)
    measured = measured_trials(study)
    written = False
    if row is not None:
        row = replace(row, trials=len(measured), study=name)
        hashes = kernels.source_hashes()
        offer_winner(study, row, spec, cache.path.parent, hashes)
        written = cache.record(row, hashes)
        kept = cache.rows(row.device, request.dtype, request.shape, request.layout)
        _keep_kernel(next((r for r in kept if r.precision == row.precision), row),
                     tuple(r for r in kept if r.precision != row.precision))
    return TuneResult(
        row=row, written=written, study_name=name, storage=masked(spec), trials=len(measured),
        new_trials=len(measured) - before, failed=sum(t.state == optuna.trial.TrialState.FAIL for t in measured),
        wall_s=time.perf_counter() - started,
    )


def _keep_kernel(row: Row, rivals: tuple[Row, ...]) -> None:
    """Compile the cache's kernel for this shape into the kernel store (autotune.store.cubins), so that a
    fresh process launches it without compiling, and remember which of it and its `rivals` (the
    cache's rows of the shape in other precisions) each precision gets; a failure there does not
    fail the tune."""
    from autotune.store import shapes

    try:
        shapes.keep(row, rivals=rivals)
    except (StoreError, OSError, ValueError) as error:
        warnings.warn(f"mmtune: the kernel was not kept in the kernel store: {error}", stacklevel=2)


def _search(request: TuneRequest, search: Search, run: StudyRun, study, progress: Progress, workers: Workers) -> None:
    if workers.placement != placement(request):
        raise TuneError(f"the workers are placed as {workers.placement}, not as --jobs and --gpus ask "
                        f"({placement(request)})")
    if not workers.placement:
        search.run(study, run.goal, run.timeout, [progress.update])
        return
    try:
        workers.run(search, run, study, progress)
    except WorkersDied as error:
        raise TuneError(str(error)) from None
