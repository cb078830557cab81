"""autotune.record(path), and MMTUNE_RECORD=path: which products a program calls through
`matmul`, how lookup served each, and how many times, merged into the file at `path`
(autotune.store.recorded) when the recording ends (for MMTUNE_RECORD, at process exit).

Each call path keeps its product on the plan it builds once per shape (`recorded`, a Recorded
with no calls). While a recording runs, `counts` maps each plan a call used to its calls, and
the call paths check `counts` once a call: a program that does not record pays one attribute
check. Plans are keys by identity, so `autotune.clear()` meanwhile loses no count. Recordings
may nest (MMTUNE_RECORD around a `with record(...)`): each counts the calls from its own start.
Calls from every thread count; the count takes no lock, to keep calls cheap, so two threads
calling at the same moment may now and then count one call.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from autotune.errors import MmtuneError
from autotune.store import recorded
from autotune.store.recorded import Recorded

ENV = "MMTUNE_RECORD"

#: plan -> its calls while a recording runs; None while none does (the call paths' one check)
counts: dict | None = None
#: call paths that count their calls themselves (autotune.torch's C++ path)
counters: list[Counter] = []
_running: list = []  # the Recordings under way, oldest first
_lock = threading.Lock()


class Counter(Protocol):
    """A call path that counts its own calls, by the plans `counts` keys them by."""

    def counting(self, on: bool) -> None:
        """Count from now on, or stop."""

    def counted(self) -> list[tuple[object, int]]:
        """(plan, calls) of the calls since the last time it was asked."""


@dataclass(eq=False)
class Recording:
    """One recording: where it writes, and the counts at its start (nested recordings)."""

    path: Path
    start: dict = field(default_factory=dict)

    def products(self) -> list[Recorded]:
        """The products called since this recording started, most called first."""
        found = []
        for plan, calls in list((counts or {}).items()):
            product, since = getattr(plan, "recorded", None), calls - self.start.get(plan, 0)
            if product is not None and since > 0:
                found.append(replace(product, calls=since))
        return recorded.merge([], found)


def start(path: Path | str) -> Recording:
    """Start counting calls for the file at `path`."""
    global counts
    with _lock:
        if counts is None:
            counts = {}
            for counter in counters:
                counter.counting(True)
        _collect()
        recording = Recording(Path(path).absolute(), dict(counts))  # the place named now, wherever the cwd goes
        _running.append(recording)
    return recording


def stop(recording: Recording) -> list[Recorded]:
    """End `recording` and merge what it counted into its file; returns what the file holds now."""
    global counts
    with _lock:
        _collect()
        products = recording.products()
        if recording in _running:
            _running.remove(recording)
        if not _running and counts is not None:
            counts = None
            for counter in counters:
                counter.counting(False)
    return recorded.add(recording.path, products)


def add_counter(counter: Counter) -> None:
    """A call path that counts its own calls, counting from now on if a recording runs."""
    with _lock:
        counters.append(counter)
        counter.counting(counts is not None)


def _collect() -> None:
    """Add what the counters counted into `counts` (under _lock); with no recording running, what
    they counted after the last one stopped is dropped."""
    for counter in counters:
        for plan, calls in counter.counted():
            if counts is not None:
                counts[plan] = counts.get(plan, 0) + calls


@contextmanager
def record(path: Path | str):
    """Within the block, count each distinct product `matmul` computes (device, dtype, precision,
    M, N, K, layout, how lookup served it) and its calls; at the end, merge them into the file at
    `path` (calls add up across runs), for `mmtune tune --recorded` and `mmtune warm --recorded`."""
    recording = start(path)
    try:
        yield recording
    finally:
        stop(recording)


def _stop_at_exit(recording: Recording) -> None:
    """MMTUNE_RECORD's end: a file that cannot be written is said on stderr, not raised."""
    try:
        stop(recording)
    except (MmtuneError, OSError) as error:
        print(f"mmtune: the recorded calls were not written to {recording.path}: {error}", file=sys.stderr)


if os.environ.get(ENV):
    atexit.register(_stop_at_exit, start(os.environ[ENV]))
