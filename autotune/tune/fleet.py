"""Winners to every host: each study keeps its fastest re-timed row, and `pull` copies them into
this host's cache.

Hosts of one GPU model share a study (its name holds the model). The first host to finish re-times
the finalists on its GPU and keeps each result in the study (autotune.tune.finalists), so hosts that
finish later reuse them; every host writes the winner to its own cache and offers it to the
study (user attribute "winner"), which keeps the faster row, under the study's setup lock.
`pull` reads the studies of one GPU model from a storage and records each winner in the local
cache by the cache's rule: a faster row already there stays, unless it was measured on older
kernel code. A study no host has finished gives its best complete trial instead; a failed trial
never counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import optuna

import kernels
from autotune.errors import PullError
from autotune.space.precision import PRECISIONS
from autotune.store.cache import Cache
from autotune.store.rows import Row, replaces
from autotune.tune.storage import masked, open_storage, setup_lock, storage_errors
from autotune.tune.study import SPACE_TAG

WINNER = "winner"
PREFIX = "mmtune:"


@dataclass
class PullResult:
    storage: str  # masked
    device: str
    studies: int  # studies of that device (and dtype) in the storage
    written: int
    kept: int  # the cache already held a faster row
    empty: int  # no verified trial yet


def offer_winner(study: optuna.Study, row: Row, spec: str, lock_dir: Path, source_hashes: dict[str, str]) -> bool:
    """Keep `row` as the study's winner if it should replace the one there (autotune.store.rows.replaces:
    the current of the two, else the faster). True if it was kept."""
    with setup_lock(spec, study.study_name, lock_dir):
        current = study.user_attrs.get(WINNER)
        if current is not None and not replaces(row, Row.of(current), source_hashes):
            return False
        study.set_user_attr(WINNER, row.as_dict())
        return True


def parse_study_name(name: str) -> tuple[str, str, tuple[int, int, int], str] | None:
    """(device, dtype, shape, layout) of an mmtune study name (autotune.tune.study.study_name), else None."""
    if not name.startswith(PREFIX):
        return None
    body, layout = name[len(PREFIX):], "NN"
    body = body.split(SPACE_TAG)[0]  # studies of any space: their winners are rows all the same
    for precision in PRECISIONS:  # a winner's row has its family's precision, whatever the study's
        body = body.removesuffix(f":{precision}")
    if body[-3:-2] == ":" and body[-2:] in kernels.LAYOUTS:
        body, layout = body[:-3], body[-2:]
    parts = body.rsplit(":", 2)
    if len(parts) != 3:
        return None
    device, dtype, shape = parts
    try:
        m, n, k = (int(x) for x in shape.split("x"))
    except ValueError:
        return None
    return device, dtype, (m, n, k), layout


def pull(spec: str, device: str | None = None, dtype: str | None = None, cache: Cache | None = None) -> PullResult:
    """Record in `cache` the winner of every study of `device` (default this host's GPU model) and
    `dtype` (default all) in the storage."""
    cache = cache or Cache()
    cache.check_writable()
    device = device or _this_device()
    storage = open_storage(spec, heartbeat=False)
    result = PullResult(storage=masked(spec), device=device, studies=0, written=0, kept=0, empty=0)
    hashes = kernels.source_hashes()
    with storage_errors(spec):
        summaries = optuna.get_all_study_summaries(storage, include_best_trial=True)
    for summary in summaries:
        parsed = parse_study_name(summary.study_name)
        if parsed is None or parsed[0] != device or (dtype is not None and parsed[1] != dtype):
            continue
        result.studies += 1
        winner = summary.user_attrs.get(WINNER)
        row = Row.of(winner) if winner else _best_trial_row(summary, *parsed)
        if row is None:
            result.empty += 1
        elif cache.record(row, hashes):
            result.written += 1
        else:
            result.kept += 1
    return result


def _this_device() -> str:
    from autotune import backends

    try:
        return backends.current().device().name
    except Exception as error:  # no GPU or no driver: Numba's CudaSupportError and kin
        raise PullError(f"no GPU here to name the device ({type(error).__name__}); give --device") from None


def _best_trial_row(summary, device: str, dtype: str, shape: tuple[int, int, int], layout: str) -> Row | None:
    """A cache row from the best complete trial of a study no host has finished (not re-timed,
    and measured on kernel code it does not record: lookup ranks it as stale)."""
    from autotune.space.encoding import config_of

    trial = summary.best_trial  # the fastest COMPLETE trial, or None
    if trial is None:
        return None
    config = config_of(trial.params)
    return Row(
        device=device, dtype=dtype, m=shape[0], n=shape[1], k=shape[2], layout=layout, family=config.family,
        params=config.params, precision=kernels.family(config.family).precision, gflops=trial.value,
        median_ms=trial.user_attrs.get("median_ms"), spread=trial.user_attrs.get("spread"), study=summary.study_name,
    )
