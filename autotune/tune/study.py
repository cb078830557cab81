"""The Optuna study of one (device, dtype, shape): created or resumed, checked, warm-started.

A study is resumed only over the space it was searched with: its name carries a hash of the
families' spaces, so after an upgrade that changes them `mmtune tune` starts a new study beside
the old one instead of refusing it. Trials whose process died are failed; a new study is queued
the shape rule's configs, the bests of the nearest tuned shapes and then each family's default.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

import kernels
from autotune.backends import Device
from autotune.errors import SpaceMismatch
from autotune.select.neighbours import ranked
from autotune.space.configs import GpuLimits, default_config, infeasibility
from autotune.space.encoding import distributions, trial_params
from autotune.space.guesses import few_rows_guess, shape_guesses, small_c_guess, small_k_guess, stream_twin
from autotune.space.problem import Problem
from autotune.store.cache import Cache
from autotune.store.records import closest_table, measured_tables, shipped_rows
from autotune.store.rows import nearest_rows
from autotune.tune.storage import masked, reap_dead_trials, setup_lock
from kernels.contract import Config, DeviceLimits

WARM_START_SHAPES = 3
#: the nearest tuned configs whose tiles a cold study also tries streamed (autotune.space.guesses.stream_twin)
STREAM_TWINS = 2
#: the measured table's best candidates for the shape that a cold study tries early
MEASURED_GUESSES = 4
MEASURED = (TrialState.COMPLETE, TrialState.FAIL)
#: user attribute of a trial that failed for the machinery's sake, not its config's
#: (errors.InfrastructureFailure): it is no measured trial, and its config may be tried again
INFRASTRUCTURE = "infrastructure"
OWNER = f"{socket.gethostname()}:{os.getpid()}"  # who runs a trial: to tell abandoned ones


SPACE_TAG = ":space-"


@dataclass(frozen=True)
class WarmStart:
    """What a new study's first configs are chosen for: the problem, the GPU it is tuned on (the
    problem's device: its compute capability and SMs), the families searched and the limits that
    keep out what cannot run."""

    problem: Problem
    gpu: Device
    families: list[str]
    limits: DeviceLimits  # autotune.space.configs.GpuLimits where the compute capability is known


def study_name(problem: Problem, narrowed: bool = False) -> str:
    """mmtune:DEVICE:DTYPE:MxNxK, :LAYOUT after it for operands in another layout than NN,
    :PRECISION for a study of a precision that leaves families out (`narrowed`,
    TuneRequest.study_precision), then :space-HASH (space_hash)."""
    m, n, k = problem.shape
    layout = "" if problem.layout == "NN" else f":{problem.layout}"
    precision = f":{problem.precision}" if narrowed else ""
    return f"mmtune:{problem.device}:{problem.dtype}:{m}x{n}x{k}{layout}{precision}{SPACE_TAG}{space_hash()}"


def space_hash() -> str:
    """A short hash of every family's search space, which Optuna cannot mix within a study."""
    spaces = {name: family.space for name, family in kernels.FAMILIES.items()}
    return hashlib.sha256(json.dumps(spaces, sort_keys=True).encode()).hexdigest()[:8]


def open_study(storage, spec: str, name: str, sampler, cache: Cache, start: WarmStart) -> optuna.Study:
    """Create or resume the study; a new one is warm-started. Tuners started together on one
    shape take turns here (a file lock beside the cache; on PostgreSQL an advisory lock, which
    holds across hosts): Optuna's enqueue_trial may queue a config twice when processes call it
    at the same time."""
    with setup_lock(spec, name, cache.path.parent):
        study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="maximize",
                                    load_if_exists=True)
        check_space(study, start.families, spec)
        fail_abandoned_trials(study, optuna.storages.get_storage(storage))
        reap_dead_trials(study)
        if not study.trials:
            study.set_user_attr("shape", list(start.problem.shape))
            study.set_user_attr("dtype", start.problem.dtype)
            for config in warm_start(cache, start):
                study.enqueue_trial(trial_params(config), skip_if_exists=True)
    return study


def check_space(study: optuna.Study, families: list[str], spec: str) -> None:
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
            raise SpaceMismatch(
                f"study {study.study_name!r} in {masked(spec)} was searched over other families (other --family "
                f"options, their order, or those this GPU runs); resume it with the same families, or start afresh "
                f"with --storage PATH"
            )


def measured_trials(study: optuna.Study) -> list:
    """Trials that ran a config for the first time to a verdict (complete, or failed with its
    reason): what --trials counts. A trial whose process died has none: it was failed as
    abandoned here, or by the RDB heartbeat reaper (autotune.tune.storage)."""
    return [
        t for t in study.get_trials(deepcopy=False, states=MEASURED)
        if "repeat_of" not in t.user_attrs and (t.state == TrialState.COMPLETE or "error" in t.user_attrs)
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


def warm_start(cache: Cache, start: WarmStart) -> list[Config]:
    """The config lookup's rules give a product of a few rows, a short K in `layout` or a small C
    (autotune.space.guesses.few_rows_guess, small_k_guess, small_c_guess), the configs the shape rule
    picks for skinny and few-tile shapes (autotune.space.guesses.shape_guesses), the
    measured table's MEASURED_GUESSES best candidates for the shape (measured_guesses), the
    bests of the nearest tuned shapes, the first STREAM_TWINS of them also as stream-K twins
    (autotune.space.guesses.stream_twin) after the first (cached, then shipped; then shipped for other GPU models of
    this GPU's compute capability, which lookup serves it until it has rows of its own), then the
    default config of each family searched, best guess first (kernels.FAMILIES order). Workers
    starting together climb from the first queued config (autotune.tune.samplers), so it should be the
    best guess."""
    problem, gpu, limits = start.problem, start.gpu, start.limits
    device, dtype, shape, sm_count, cc = problem.device, problem.dtype, problem.shape, gpu.sm_count, gpu.cc
    tuned = cache.nearest(device, dtype, shape, WARM_START_SHAPES)
    tuned += nearest_rows(shipped_rows(device, dtype), shape, WARM_START_SHAPES)
    if cc:
        kin = [row for row in shipped_rows(None, dtype) if row.device != device and row.cc == cc]
        tuned += nearest_rows(kin, shape, WARM_START_SHAPES)
    target = GpuLimits.of(limits, cc, sm_count)
    rules = [few_rows_guess(shape, dtype, target, layout=problem.layout),
             small_k_guess(shape, dtype, target, problem.layout),
             small_c_guess(shape, dtype, target, layout=problem.layout)]
    candidates = [config for config in rules if config is not None]
    candidates += shape_guesses(shape, dtype, target) if sm_count else []
    candidates += measured_guesses(start)
    nearest = [row.config for _, row in tuned]
    candidates += nearest[:1] + [twin for twin in map(stream_twin, nearest[:STREAM_TWINS]) if twin] + nearest[1:]
    candidates += [Config.of(f, default_config(f)) for f in kernels.FAMILIES if f in start.families]
    chosen = []
    for config in candidates:
        if (config.family in start.families and config not in chosen
                and infeasibility(config.family, config.params, dtype, limits) is None):
            chosen.append(config)
    return chosen


def measured_guesses(start: WarmStart) -> list[Config]:
    """The MEASURED_GUESSES candidates that the measured table of the GPU closest to this one
    (records.closest_table: this model, its architecture, else another) rates best for the shape
    (autotune.select.neighbours), as lookup picks from it, among the families searched; the limits
    (space.GpuLimits) keep out the instructions this GPU lacks."""
    dtype, limits = start.problem.dtype, start.limits
    found = closest_table(measured_tables(), dtype, start.gpu)
    if found is None or not start.gpu.sm_count:
        return []
    table = found[1]
    picks = ranked(table, start.problem.shape, start.gpu.sm_count, count=MEASURED_GUESSES,
                   feasible=lambda family, params: (family in start.families
                                                    and infeasibility(family, params, dtype, limits) is None),
                   layout=start.problem.layout)
    return [Config.of(pick.family, pick.config) for pick in picks]
