"""Numba's CUDA simulator: kernels run as Python threads on the CPU; timings mean nothing.

MMTUNE_PRETEND_GPU="NAME;CC;SMS" (e.g. "NVIDIA H100 80GB HBM3;9.0;132") makes the simulator say it
is that GPU, so the lookup's rules for serving one GPU model another's records can be tested on
the CPU. Without it the device is "simulator" and rows are recorded under that name.

Importing this module makes the simulator's barriers wait on a condition instead of a polling
loop (BarrierBlockManager): numba-cuda's block manager polls its threads while holding the GIL,
so every `syncthreads` waits for the interpreter's switch interval, and a kernel that meets
its block at a barrier per step (the tensor-core families' simulated mma) runs several times
slower. The semantics stay numba-cuda's: a barrier opens once every thread still running has
reached it, and the first exception of a thread ends the block with that exception.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
from numba.cuda.simulator import kernel as simulator_kernel

from autotune.backends import Device
from kernels.contract import DeviceLimits
from kernels.rules import Arch

PRETEND_ENV = "MMTUNE_PRETEND_GPU"


class Simulator:
    name = "simulator"

    def device(self) -> Device:
        pretend = os.environ.get(PRETEND_ENV)
        if not pretend:
            return Device("simulator", "", 0)
        try:
            model, cc, sms = pretend.split(";")
            return Device(model, str(Arch.of(cc)), int(sms))
        except ValueError:
            raise ValueError(f"{PRETEND_ENV} must be 'NAME;CC;SMS' like 'NVIDIA H100 80GB HBM3;9.0;132', got {pretend!r}") from None

    def limits(self) -> DeviceLimits:
        return DeviceLimits.for_cc(self.device().cc)

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


class BarrierThread(simulator_kernel.BlockThread):
    """A simulated CUDA thread whose `syncthreads` waits on its block's condition."""

    def run(self):
        block = self._manager
        try:
            super().run()
        finally:
            with block.condition:
                block.live -= 1
                if self.exception is not None:
                    block.fail(self)
                elif block.waiting and block.waiting == block.live:
                    block.open_barrier()

    def syncthreads(self):
        block = self._manager
        with block.condition:
            if block.failed is not None:
                raise RuntimeError("abort flag set on syncthreads call")
            generation = block.generation
            block.waiting += 1
            if block.waiting == block.live:
                block.open_barrier()
            while generation == block.generation and block.failed is None:
                block.condition.wait()
            if block.failed is not None:
                raise RuntimeError("abort flag set on syncthreads clear")


class BarrierBlockManager(simulator_kernel.BlockManager):
    """Runs one block's threads to the end; barriers open as its threads arrive (BarrierThread)."""

    def open_barrier(self):
        self.waiting = 0
        self.generation += 1
        self.condition.notify_all()

    def fail(self, thread):
        if self.failed is None:
            self.failed = thread
        self.condition.notify_all()

    def run(self, grid_point, *args):
        points = list(np.ndindex(*self._block_dim))
        self.condition = threading.Condition()
        self.waiting, self.generation, self.live, self.failed = 0, 0, len(points), None

        def target():
            self._f(*args)

        threads = [BarrierThread(target, self, grid_point, point, self._debug) for point in points]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if self.failed is not None:
            error, traceback = self.failed.exception
            raise error.with_traceback(traceback)


simulator_kernel.BlockManager = BarrierBlockManager
BACKEND = Simulator()
