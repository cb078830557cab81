"""Measuring in a child process, so a faulting or hanging kernel costs one trial, not the study.

An illegal memory access poisons the CUDA context of the process it happens in: every later CUDA
call there fails. So the tuner hands each trial to a child process (its own CUDA context) by
default. When the measurement raises, the child dies, or no answer comes within the time limit,
the trial fails with that reason, the child is stopped, and the next trial gets a fresh one.

A child that does not start (no GPU for it, no memory, no process) is the machinery's failure,
not the config's: InfrastructureFailure, which the tuner does not count as a trial.
"""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass
from typing import Callable

import numpy as np

from autotune import backends
from autotune.errors import InfrastructureFailure, MeasureFailed
from autotune.measure.measurement import Measurement, measure

START_TIMEOUT_S = 120.0  # importing numba and creating a CUDA context in a new process


@dataclass(frozen=True)
class _Trial:
    """What the child measures: a kernel's build (kernels.build's arguments), where and how often."""

    family: str
    config: dict
    dtype: str
    layout: str
    offset_bits: int
    unaligned: str
    shape: tuple[int, int, int]
    seed: int
    warmup: int
    repeat: int
    lock: str | None


def _serve(connection, measure_fn: Callable) -> None:
    """The child: build and measure what the parent sends, until told to stop or an error."""
    import kernels

    try:
        backends.require_gpu()
        backends.current().device()  # the CUDA context, so that a GPU that refuses one fails the start
    except Exception as error:
        connection.send(("unavailable", f"{type(error).__name__}: {error}"))
        return
    connection.send("ready")
    while True:
        request = connection.recv()
        if request is None:
            return
        try:
            kernel = kernels.build(request.family, request.config, request.dtype, request.layout, request.offset_bits,
                                   request.unaligned)
            rng = np.random.default_rng(request.seed)
            result = measure_fn(kernel, request.shape, rng, warmup=request.warmup, repeat=request.repeat,
                                lock=request.lock)
        except Exception as error:  # the context may be poisoned: report, then make way for a fresh child
            connection.send(("error", f"{type(error).__name__}: {error}"))
            return
        connection.send(("ok", result))


class Isolated:
    """A measurer (like autotune.measure.measurement.measure) that runs `measure_fn` in a child process and
    fails the trial after `timeout_s` seconds without an answer."""

    def __init__(self, measure_fn: Callable = measure, timeout_s: float = 300.0):
        self.measure_fn = measure_fn
        self.timeout_s = timeout_s
        self._process = None
        self._connection = None
        self._ready = False

    def __call__(self, kernel, shape, rng, warmup=3, repeat=20, lock=None) -> Measurement:
        connection = self._child()
        trial = _Trial(family=kernel.family, config=kernel.config, dtype=kernel.dtype, layout=kernel.layout,
                       offset_bits=kernel.offset_bits, unaligned=kernel.unaligned, shape=tuple(shape),
                       seed=int(rng.integers(2**63)), warmup=warmup, repeat=repeat, lock=lock)
        try:
            connection.send(trial)
        except OSError as error:  # it ended before it was given the trial
            self.close()
            raise InfrastructureFailure(f"the measuring process ended before its trial ({error})") from None
        if not connection.poll(self.timeout_s):
            self.close()
            raise MeasureFailed(f"no result within {self.timeout_s:g} s: the measuring process was killed")
        try:
            status, payload = connection.recv()
        except EOFError:
            code = self._stop()
            raise MeasureFailed(f"the measuring process died (exit code {code})") from None
        if status == "error":
            self._stop()
            raise MeasureFailed(payload)
        return payload

    def start(self) -> None:
        """Start the child now, without waiting for it (importing numba and creating a CUDA context
        take seconds), so it is ready when the first measurement comes."""
        if self._process is None or not self._process.is_alive():
            self._spawn()

    def _child(self):
        if self._process is None or (self._ready and not self._process.is_alive()):
            self._spawn()
        if not self._ready:  # one `start` began, or just spawned: its word, or why it ended
            self._await_ready()
        return self._connection

    def _spawn(self) -> None:
        self.close()
        context = multiprocessing.get_context("spawn")  # a CUDA context must not be forked
        try:
            self._connection, child_end = context.Pipe()
            self._process = context.Process(target=_serve, args=(child_end, self.measure_fn), daemon=True)
            self._process.start()
        except Exception as error:  # no memory, no process left, or a process that may not start one
            self.close()
            raise InfrastructureFailure(f"the measuring process did not start ({type(error).__name__}: {error})") from None
        child_end.close()

    def _await_ready(self) -> None:
        try:
            answer = self._connection.recv() if self._connection.poll(START_TIMEOUT_S) else (
                "", f"no word from it within {START_TIMEOUT_S:g} s")
        except EOFError:
            answer = ("", f"it ended (exit code {self._stop()})")
        if answer != "ready":
            self.close()
            raise InfrastructureFailure(f"the measuring process did not start: {answer[1]}")
        self._ready = True

    def _stop(self) -> int | None:
        """Wait for a child that is exiting by itself; return its exit code."""
        process = self._process
        if process is not None:
            process.join(10)
        code = process.exitcode if process is not None else None
        self.close()
        return code

    def close(self) -> None:
        """Stop the child, if any."""
        if self._process is not None:
            if self._process.is_alive():
                try:
                    self._connection.send(None)
                except (BrokenPipeError, OSError):
                    pass
                self._process.join(1)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
        self._process = self._connection = None
        self._ready = False

    def __getstate__(self):
        """Worker processes get the settings, not the child: each starts its own."""
        return {"measure_fn": self.measure_fn, "timeout_s": self.timeout_s, "_process": None, "_connection": None,
                "_ready": False}
