"""Where Optuna studies live: a journal file beside the cache by default, or any Optuna storage URL."""

from __future__ import annotations

import optuna

from autotune.cache import Cache


def storage_spec(storage: str | None, cache: Cache) -> str:
    """An Optuna storage URL as given, or by default the path of a journal file beside the cache:
    Optuna recommends journal storage over SQLite when several processes share a study."""
    return storage or str(cache.path.parent / "studies.journal")


def open_storage(spec: str):
    if "://" in spec:
        return spec
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(spec))
