"""Where mmtune keeps its files: one place, importing nothing heavy, so the call path can find the
cache and the kernel store without loading sqlite-utils or numba."""

from __future__ import annotations

import fcntl
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

CACHE_ENV = "MMTUNE_CACHE"
STORE_ENV = "MMTUNE_KERNELS"


def user_cache() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("mmtune"))


def cache_file() -> Path:
    """MMTUNE_CACHE, else cache.db in the platform's user cache directory."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else user_cache() / "cache.db"


def store_directory() -> Path:
    """MMTUNE_KERNELS, else kernels/ in the platform's user cache directory."""
    env = os.environ.get(STORE_ENV)
    return Path(env).expanduser() if env else user_cache() / "kernels"


def write_atomically(path: Path, data: bytes) -> None:
    """Readers see the old file or the new one, never a part: write aside, then rename over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@contextmanager
def exclusive(lock: str | Path | None):
    """Hold the file lock `lock` (nothing if None): writers of one file, one at a time."""
    if lock is None:
        yield
        return
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
