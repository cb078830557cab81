"""Every error mmtune raises for its user, under one base, MmtuneError, so that the CLI answers each
with one line and exit status 2 in one place (autotune.cli.app) and a library caller can catch them all.
Each also keeps the built-in kind it always had (ValueError, RuntimeError), so code that catches
those still does.
"""

from __future__ import annotations

import errno


class MmtuneError(Exception):
    """Something mmtune cannot do as asked; the message says what to do instead."""


class UserError(MmtuneError):
    """A mistake in the command line or its environment."""


class OperandError(MmtuneError, ValueError):
    """The operands do not fit the kernel: shape, dtype, layout or device."""


class PrecisionError(MmtuneError, ValueError):
    """A precision mmtune does not know."""


class CacheError(MmtuneError):
    """The cache file cannot be used as it is."""


class RecordsError(MmtuneError, ValueError):
    """A records file (the export format) is malformed."""


class RecordedError(MmtuneError, ValueError):
    """A file of recorded calls (autotune.record) is missing or malformed."""


class PromoteError(MmtuneError, ValueError):
    """Rows that cannot be promoted, or a records file that cannot be written."""


class StoreError(MmtuneError, RuntimeError):
    """A kernel could not be built for the store (compile or link failed)."""


class MeasureFailed(MmtuneError, RuntimeError):
    """The measurement of one config failed in its child process (raised, died or hung)."""


class StorageError(MmtuneError):
    """The study storage cannot be reached or used; the message never holds a password."""


class SamplerError(MmtuneError, ValueError):
    """An unknown sampler, or one whose dependency is missing."""


class SpaceMismatch(MmtuneError, ValueError):
    """The study was searched over another space than the one asked for."""


class WorkersDied(MmtuneError, RuntimeError):
    """Worker processes ended with an error; the study keeps what they measured."""


class TuneError(MmtuneError, ValueError):
    """The tuning request itself is wrong, or cannot go on."""


class PullError(MmtuneError, ValueError):
    """Pulling cannot start: no GPU to name the device."""


class LaunchError(MmtuneError, RuntimeError):
    """The driver refused a call: the message names the call and the CUDA error."""


class CaptureError(MmtuneError, RuntimeError):
    """A call during CUDA graph capture that would need to compile, load or allocate."""


class PeersError(MmtuneError):
    """The peers bench cannot run here (no PyTorch, no GPU)."""


class NoGpuError(MmtuneError, RuntimeError):
    """No CUDA GPU can be used here (no driver, or no device) and the simulator is off."""


class InfrastructureFailure(MmtuneError, RuntimeError):
    """A trial failed for the machinery's sake (its measuring process did not start), not its
    config's: it does not count toward --trials, and a few in a row stop the tune."""


class OutputError(MmtuneError, OSError):
    """A file cannot be written where the user asked (no such directory, a directory, read-only, full)."""


#: what to do about an OSError on a path the user gave, by its errno
_PATH_ADVICE = {
    errno.ENOENT: "no such file or directory; check the path, or create its directory first",
    errno.ENOTDIR: "a part of the path is a file, not a directory; give another path",
    errno.EISDIR: "it is a directory; give a file path",
    errno.EACCES: "it is read-only here (permission denied); give a writable path",
    errno.EPERM: "it is read-only here (operation not permitted); give a writable path",
    errno.EROFS: "it is on a read-only file system; give a writable path",
    errno.ENOSPC: "no space is left on its device; free some, or give another path",
    errno.EDQUOT: "the disk quota is exhausted; free some, or give another path",
}


def advice(error: OSError) -> str:
    """What went wrong with a path the user named, and what to do, in words (no path)."""
    return _PATH_ADVICE.get(error.errno, (error.strerror or str(error)).lower())


def path_problem(error: OSError) -> str:
    """An OSError on a path the user named, in one line: the path, what went wrong, what to do."""
    return f"{error.filename}: {advice(error)}" if error.filename is not None else advice(error)
