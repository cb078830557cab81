"""NVIDIA GPUs through Numba CUDA (numba-cuda, with the NVVM and nvJitLink wheels)."""

from __future__ import annotations

import functools
import math
import time
from functools import cache
from typing import Callable

from autotune.backends import Device
from kernels.base import DeviceLimits
from kernels.rules import DEFAULT_DYNAMIC_SHARED, Arch

SAMPLE_SECONDS = 2e-4  # each timed sample is an event pair around enough launches to last this long
#: the hold lasts this many times the host's time to enqueue the sample (plus HOLD_SLACK_US),
#: doubling after each sample whose launches the GPU reached before the host had enqueued them all
HOLD_MARGIN = 2.0
HOLD_SLACK_US = 20
HOLD_ATTEMPTS = 3  # at most this many samples per one asked for
MAX_HOLD_SECONDS = 0.05  # of launches enqueued per sample; a hold never exceeds 4x this


class NumbaCuda:
    name = "numba-cuda"

    @cache
    def device(self) -> Device:
        from numba import cuda

        device = cuda.get_current_device()
        name = device.name.decode() if isinstance(device.name, bytes) else str(device.name)
        version = cuda.cudadrv.driver.driver.get_version()
        return Device(name, str(Arch.of(device.compute_capability)), device.MULTIPROCESSOR_COUNT,
                      "{}.{}".format(*version))

    def limits(self) -> DeviceLimits:
        from numba import cuda

        attrs = cuda.get_current_device()
        return DeviceLimits(
            max_threads_per_block=attrs.MAX_THREADS_PER_BLOCK,
            max_shared_per_block=min(attrs.MAX_SHARED_MEMORY_PER_BLOCK, DEFAULT_DYNAMIC_SHARED),
            max_registers_per_block=attrs.MAX_REGISTERS_PER_BLOCK,
            max_threads_per_sm=attrs.MAX_THREADS_PER_MULTIPROCESSOR,
            max_dynamic_shared_per_block=attrs.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )

    def to_device(self, array):
        from numba import cuda

        return cuda.to_device(array)

    def empty(self, shape, dtype):
        from numba import cuda

        return cuda.device_array(shape, dtype)

    def synchronize(self) -> None:
        from numba import cuda

        cuda.synchronize()

    def is_device_array(self, x) -> bool:
        from numba import cuda

        return cuda.devicearray.is_cuda_ndarray(x)

    def device_view(self, x):
        from numba import cuda

        if self.is_device_array(x):
            return x
        if hasattr(x, "__cuda_array_interface__"):
            return cuda.as_cuda_array(x)
        return None

    timing_method = "device time: CUDA events around launches queued behind a hold kernel (host launch cost excluded)"

    def prepare_timing(self) -> None:
        _hold_kernel()

    def time(self, launch, warmup: int, repeat: int) -> tuple[list[float], int]:
        """Per-launch milliseconds from CUDA events. Every sample is queued behind a kernel that
        sleeps until the host has enqueued the sample's launches, so the GPU runs them back to
        back and the events time the GPU alone, even where launching costs the host more than
        the kernel runs."""
        from numba import cuda

        launch()  # loads, compiles and allocates whatever the first call does, untimed
        cuda.synchronize()
        count = max(warmup, 1)
        started = time.perf_counter()
        for _ in range(count):
            launch()
        queue = _HeldQueue(launch, (time.perf_counter() - started) / count)
        cuda.synchronize()
        start, stop, _ = queue.sample(1)
        stop.synchronize()
        single_ms = cuda.event_elapsed_time(start, stop)
        per_sample = max(1, min(1000, math.ceil(SAMPLE_SECONDS * 1e3 / max(single_ms, 1e-4)),
                                int(MAX_HOLD_SECONDS / max(queue.enqueue_s, 1e-7))))
        held, drained = [], []
        for _ in range(HOLD_ATTEMPTS * repeat):
            start, stop, was_held = queue.sample(per_sample)
            (held if was_held else drained).append((start, stop))
            if len(held) == repeat:
                break
        cuda.synchronize()
        # A sample whose queue drained (the host was descheduled, or `launch` waits for the GPU)
        # timed the host too: it counts only if no sample could be held.
        return [cuda.event_elapsed_time(start, stop) / per_sample for start, stop in held or drained], per_sample

    def cublas(self):
        """cuBLAS through CuPy as f(dA, dB, dC) on Numba device arrays (TF32 off: CuPy's default
        for float32), or None without CuPy. The CuPy views of the last operands are kept, so a
        repeated call costs what `cupy.matmul` on CuPy arrays costs a CuPy user."""
        try:
            import cupy
        except ImportError:
            return None
        views: dict[tuple, tuple] = {}

        def matmul(dA, dB, dC):
            key = (id(dA), id(dB), id(dC))
            if key not in views:
                views.clear()  # the operands are kept with their views, so their ids stay theirs
                views[key] = ((dA, dB, dC), tuple(cupy.asarray(x) for x in (dA, dB, dC)))
            a, b, c = views[key][1]
            cupy.matmul(a, b, out=c)

        return matmul

    def free_memory(self) -> float:
        from numba import cuda

        return cuda.current_context().get_memory_info().free


class _HeldQueue:
    """Samples of `launch` on the default stream behind a kernel that sleeps until the host has
    enqueued them: the GPU then runs them back to back, so the events time the GPU alone."""

    def __init__(self, launch: Callable[[], None], enqueue_s: float):
        self.launch, self.enqueue_s, self.margin = launch, enqueue_s, HOLD_MARGIN

    def sample(self, launches: int):
        """(start, stop, held): an event pair around `launches` launches, and whether all of
        them were enqueued before the GPU reached the start event."""
        from numba import cuda

        microseconds = self.margin * launches * self.enqueue_s * 1e6 + HOLD_SLACK_US
        _hold_kernel()[1, 1](int(min(microseconds, 4 * MAX_HOLD_SECONDS * 1e6)))
        start, stop = cuda.event(), cuda.event()
        start.record()
        for _ in range(launches):
            self.launch()
        stop.record()
        held = not start.query()
        if not held:
            self.margin *= 2
        return start, stop, held


@functools.cache
def _hold_kernel():
    """A one-thread kernel that sleeps about `microseconds` (nanosleep is approximate; the
    caller checks whether the hold lasted)."""
    from numba import cuda

    @cuda.jit("void(int64)")
    def hold(microseconds):
        for _ in range(microseconds):
            cuda.nanosleep(1000)

    return hold


BACKEND = NumbaCuda()
