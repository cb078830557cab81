"""Where studies live: a journal file on this host, or a PostgreSQL server a fleet of hosts shares.

A storage spec is a path (Optuna's journal file, the default, for one host) or an RDB URL. For
PostgreSQL, Optuna's RDBStorage coordinates the trials of many hosts, and this module adds what a
fleet needs: heartbeats, so a dead host's running trial is failed (and its config queued again)
by whichever host asks for a trial next; a cross-host lock for the study setup (a PostgreSQL
advisory lock; the journal keeps its file lock); errors as one line; and the URL's password
masked wherever mmtune shows a spec. The password may also come from PGPASSWORD or a .pgpass file,
which libpq reads when the URL has none.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import warnings
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import optuna

from autotune.errors import StorageError
from autotune.store.cache import Cache

#: seconds between a running trial's heartbeats, and without one before the trial counts as dead
HEARTBEAT_ENV, GRACE_ENV = "MMTUNE_HEARTBEAT_S", "MMTUNE_GRACE_S"
DEFAULT_HEARTBEAT_S, DEFAULT_GRACE_S = 30, 120
CONNECT_TIMEOUT_S = 10
#: plain postgresql:// URLs use psycopg (v3), the driver of the `postgres` extra
DRIVER = "postgresql+psycopg"
_SCHEMA_LOCK = "mmtune:schema"  # advisory lock name while Optuna creates its tables


def storage_spec(storage: str | None, cache: Cache) -> str:
    """An Optuna storage URL as given, or by default the path of a journal file beside the cache:
    Optuna recommends journal storage over SQLite when several processes share a study."""
    return storage or str(cache.path.parent / "studies.journal")


def is_url(spec: str) -> bool:
    return "://" in spec


def masked(spec: str) -> str:
    """The spec as mmtune shows it: a URL's password as *** (SQLAlchemy's rendering)."""
    if not is_url(spec):
        return spec
    try:
        from sqlalchemy.engine import make_url

        return make_url(spec).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy can parse: mask whatever stands where a password would
        return re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", spec)


def scrub(text: str, spec: str) -> str:
    """`text` with the spec's URL masked and its password, wherever else it appears, as ***."""
    text = text.replace(spec, masked(spec))
    password = _password(spec)
    return text.replace(password, "***") if password else text


def _password(spec: str) -> str | None:
    if not is_url(spec):
        return None
    try:
        from sqlalchemy.engine import make_url

        return make_url(spec).password
    except Exception:
        found = re.search(r"://[^/@:]*:([^/@]*)@", spec)
        return found.group(1) if found else None


def _url(spec: str):
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(spec)
    except ArgumentError:
        raise StorageError(f"{masked(spec)} is not a storage URL (like postgresql://user@host/db)") from None
    return url.set(drivername=DRIVER) if url.drivername == "postgresql" else url


def is_postgres(spec: str) -> bool:
    return is_url(spec) and _url(spec).get_backend_name() == "postgresql"


def heartbeat_settings() -> tuple[int, int]:
    """(interval, grace) in whole seconds, from MMTUNE_HEARTBEAT_S and MMTUNE_GRACE_S."""
    values = []
    for name, default in ((HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S), (GRACE_ENV, DEFAULT_GRACE_S)):
        text = os.environ.get(name, str(default))
        if not text.isdigit() or int(text) < 1:
            raise StorageError(f"{name} must be a whole number of seconds, at least 1; got {text!r}")
        values.append(int(text))
    interval, grace = values
    if grace <= interval:
        raise StorageError(f"{GRACE_ENV} ({grace}) must exceed {HEARTBEAT_ENV} ({interval})")
    return interval, grace


class _BeatingStorage(optuna.storages.RDBStorage):
    """RDBStorage whose heartbeat thread outlives a moment without the server: Optuna's thread
    ends (with a traceback) on the first error, and the trial would then be reaped as dead."""

    def record_heartbeat(self, trial_id: int) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            super().record_heartbeat(trial_id)
        except (SQLAlchemyError, optuna.exceptions.StorageInternalError):
            pass  # the next beat tries again; a server away past the grace period costs the trial


def requeue_dead_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Called by Optuna after it failed a trial whose host stopped beating: queue the config again,
    once, so a live host measures it (the failed trial has no verdict on it)."""
    if trial.params and "requeued_from" not in trial.user_attrs:
        study.enqueue_trial(trial.params, user_attrs={"requeued_from": trial.number})


def open_storage(spec: str, heartbeat: bool = True):
    """The Optuna storage for `spec`. An RDB URL is connected to now (StorageError if that fails);
    with `heartbeat`, each running trial beats and dead hosts' trials are reaped (RDB only)."""
    if not is_url(spec):
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(spec))
    url = _url(spec)
    options = {}
    if heartbeat:
        interval, grace = heartbeat_settings()
        callback = ("heartbeat_stale_trial_callback"
                    if "heartbeat_stale_trial_callback" in inspect.signature(optuna.storages.RDBStorage).parameters
                    else "failed_trial_callback")  # its name before Optuna 4.9
        options = {"heartbeat_interval": interval, "grace_period": grace, callback: requeue_dead_trial}
    engine_kwargs = {"pool_pre_ping": True}  # a connection the server dropped (restart) is replaced
    if url.get_backend_name() == "postgresql":
        engine_kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
    with storage_errors(spec), warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        with _advisory_lock(spec, _SCHEMA_LOCK):  # hosts starting together create the tables once
            return _BeatingStorage(url.render_as_string(hide_password=False), engine_kwargs=engine_kwargs, **options)


@contextmanager
def storage_errors(spec: str):
    """Turn the driver's, SQLAlchemy's and Optuna's storage errors into one StorageError line,
    also where one surfaces as the context of another error (Optuna's trial bookkeeping can fail
    on its way out of a lost connection with an error of its own)."""
    try:
        yield
    except StorageError:
        raise
    except ImportError as error:  # SQLAlchemy found no driver for the URL
        if not is_url(spec):
            raise
        missing = error.__cause__ or error
        raise StorageError(f"study storage {masked(spec)}: its database driver is missing ({missing}); "
                           f"for PostgreSQL: pip install 'mmtune[postgres]'") from None
    except Exception as error:
        # a host name the resolver cannot even encode fails in the driver as a UnicodeError
        cause = error if isinstance(error, UnicodeError) and "idna" in str(error) else _storage_cause(error)
        if cause is None:
            raise
        raise StorageError(f"study storage {masked(spec)}: {_first_line(cause, spec)}") from None


def _storage_cause(error: BaseException) -> BaseException | None:
    """The storage error in `error`'s chain of causes and contexts, the driver's own if there."""
    from sqlalchemy.exc import SQLAlchemyError

    found, seen = None, set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, (SQLAlchemyError, optuna.exceptions.StorageInternalError)):
            found = error
            if isinstance(error, SQLAlchemyError):
                return error
        error = error.__cause__ or error.__context__
    return found


def _first_line(error: BaseException, spec: str) -> str:
    """The driver's own message (SQLAlchemy wraps it in the statement and a link), one line."""
    original = getattr(error, "orig", None) or error
    lines = [line.strip() for line in str(original).splitlines() if line.strip()]
    text = " ".join(lines[:2]) if lines else type(original).__name__
    return scrub(text, spec)[:400]


@contextmanager
def setup_lock(spec: str, name: str, lock_dir: Path):
    """Held while a study is created and warm-started, or its winner updated: a PostgreSQL advisory
    lock on the study's name for a server many hosts share, else a file lock in `lock_dir`."""
    if is_postgres(spec):
        with storage_errors(spec), _advisory_lock(spec, name):
            yield
    else:
        from autotune.store.paths import exclusive

        with exclusive(str(Path(lock_dir) / "study-setup.lock")):
            yield


@contextmanager
def _advisory_lock(spec: str, name: str):
    """A session-level pg_advisory_lock on a 64-bit key hashed from `name`, on a connection of its
    own (nothing for other URLs). Closing that connection ends the session, which releases the
    lock, also when the server went away meanwhile."""
    if not is_postgres(spec):
        yield
        return
    from sqlalchemy import text

    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
    with _lock_engine(spec).connect() as connection:
        connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
        connection.commit()
        yield


@lru_cache(maxsize=None)
def _lock_engine(spec: str):
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    return sqlalchemy.create_engine(_url(spec), poolclass=NullPool,  # a closed connection is really closed
                                    connect_args={"connect_timeout": CONNECT_TIMEOUT_S})


def reap_dead_trials(study: optuna.Study) -> None:
    """Fail (and queue again) the trials whose heartbeat stopped past the grace period: what
    Optuna does before each trial, done also when a study is opened."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
