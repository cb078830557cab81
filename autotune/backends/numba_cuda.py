"""NVIDIA GPUs through Numba CUDA (numba-cuda, with the NVVM and nvJitLink wheels)."""

from __future__ import annotations

import math
from functools import cache

from autotune.backends import Device
from kernels.base import DeviceLimits

SAMPLE_SECONDS = 2e-4  # each timed sample is an event pair around enough launches to last this long


class NumbaCuda:
    name = "numba-cuda"

    @cache
    def device(self) -> Device:
        from numba import cuda

        device = cuda.get_current_device()
        name = device.name.decode() if isinstance(device.name, bytes) else str(device.name)
        version = cuda.cudadrv.driver.driver.get_version()
        return Device(name, "{}.{}".format(*device.compute_capability), device.MULTIPROCESSOR_COUNT,
                      "{}.{}".format(*version))

    def limits(self) -> DeviceLimits:
        from numba import cuda

        attrs = cuda.get_current_device()
        return DeviceLimits(
            max_threads_per_block=attrs.MAX_THREADS_PER_BLOCK,
            max_shared_per_block=min(attrs.MAX_SHARED_MEMORY_PER_BLOCK, 48 * 1024),
            max_registers_per_block=attrs.MAX_REGISTERS_PER_BLOCK,
            max_threads_per_sm=attrs.MAX_THREADS_PER_MULTIPROCESSOR,
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

    def time(self, launch, warmup: int, repeat: int) -> tuple[list[float], int]:
        """Per-launch milliseconds from CUDA events: every sample is enqueued behind a lead launch
        before any is waited for, so the GPU runs them back to back and a host busy elsewhere
        (compiling the next trial) adds no idle time to them."""
        from numba import cuda

        for _ in range(warmup):
            launch()
        cuda.synchronize()
        start, stop = cuda.event(), cuda.event()
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        single_ms = cuda.event_elapsed_time(start, stop)
        per_sample = max(1, min(1000, math.ceil(SAMPLE_SECONDS * 1e3 / max(single_ms, 1e-4))))
        events = [(cuda.event(), cuda.event()) for _ in range(repeat)]
        launch()
        for start, stop in events:
            start.record()
            for _ in range(per_sample):
                launch()
            stop.record()
        cuda.synchronize()
        return [cuda.event_elapsed_time(start, stop) / per_sample for start, stop in events], per_sample

    def cublas(self):
        """cuBLAS through CuPy as f(dA, dB, dC) on Numba device arrays (TF32 off: CuPy's default
        for float32), or None without CuPy."""
        try:
            import cupy
        except ImportError:
            return None

        def matmul(dA, dB, dC):
            cupy.matmul(cupy.asarray(dA), cupy.asarray(dB), out=cupy.asarray(dC))

        return matmul

    def free_memory(self) -> float:
        from numba import cuda

        return cuda.current_context().get_memory_info().free


BACKEND = NumbaCuda()
