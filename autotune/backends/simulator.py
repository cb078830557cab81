"""Numba's CUDA simulator: kernels run as Python threads on the CPU; timings mean nothing.

MMTUNE_PRETEND_GPU="NAME;CC;SMS" (e.g. "NVIDIA H100 80GB HBM3;9.0;132") makes the simulator say it
is that GPU, so the lookup's rules for serving one GPU model another's records can be tested on
the CPU. Without it the device is "simulator" and rows are recorded under that name.
"""

from __future__ import annotations

import os
import time

import numpy as np

from autotune.backends import Device
from kernels.base import DeviceLimits

PRETEND_ENV = "MMTUNE_PRETEND_GPU"


class Simulator:
    name = "simulator"

    def device(self) -> Device:
        pretend = os.environ.get(PRETEND_ENV)
        if not pretend:
            return Device("simulator", "", 0)
        try:
            model, cc, sms = pretend.split(";")
            return Device(model, cc, int(sms))
        except ValueError:
            raise ValueError(f"{PRETEND_ENV} must be 'NAME;CC;SMS' like 'NVIDIA H100 80GB HBM3;9.0;132', got {pretend!r}") from None

    def limits(self) -> DeviceLimits:
        return DeviceLimits()

    def to_device(self, array):
        from numba import cuda

        return cuda.to_device(array)

    def empty(self, shape, dtype):
        from numba import cuda

        return cuda.device_array(shape, dtype)

    def synchronize(self) -> None:
        pass

    def is_device_array(self, x) -> bool:
        from numba import cuda

        return cuda.devicearray.is_cuda_ndarray(x)

    def device_view(self, x):
        return x if self.is_device_array(x) else None

    timing_method = "host wall time under the simulator (meaningless)"

    def prepare_timing(self) -> None:
        pass

    def time(self, launch, warmup: int, repeat: int, samples: int = 3) -> tuple[list[float], int]:
        """Host wall time of a few launches: enough to exercise the path, worthless as a timing."""
        found = []
        for _ in range(min(repeat, samples)):
            start = time.perf_counter()
            launch()
            found.append((time.perf_counter() - start) * 1e3)
        return found, 1

    def cublas(self):
        return None

    def free_memory(self) -> float:
        return float(np.inf)


BACKEND = Simulator()
