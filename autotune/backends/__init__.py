"""The seam between mmtune and a GPU API: everything that differs between running on a real GPU
through Numba CUDA and running on the CPU under Numba's CUDA simulator.

A backend is one module here exporting `BACKEND`, an object with:

    name                   "numba-cuda", "simulator", ...
    device() -> Device     what the current GPU is: its model name, compute capability, SM count
                           and driver; the cache and the shipped records are keyed by it
    limits() -> DeviceLimits
                           what one block may use on it (threads, shared memory, registers)
    to_device(array), empty(shape, dtype), synchronize()
                           device memory, as a compiled kernel takes it
    is_device_array(x), device_view(x)
                           recognise and view the caller's device arrays (CuPy, PyTorch, ...)
    time(launch, warmup, repeat) -> (samples, launches_per_sample)
                           per-launch milliseconds of `launch()`: device time where there is a device
    prepare_timing()       compile or load what `time` needs, before a measuring lock is taken
    timing_method          one line saying how `time` measures, for benchmark output
    cublas() -> f(dA, dB, dC) | None
                           the vendor BLAS on the same arrays, for benchmarks
    free_memory() -> bytes free on the device

Kernels are written once, in Numba's CUDA dialect (kernels/: `Kernel.compile` turns one into a
dispatcher). A HIP backend for AMD GPUs (the seed's ROC example) would be one more module here
with these functions on its device arrays, an entry in `_BACKENDS`, and a HIP target for
`Kernel.compile`; nothing above this package branches on the backend. The fast call path
(autotune.call.front with autotune.backends.launch and autotune.store.cubins: cubins launched through the CUDA
driver) is NVIDIA's alone; on another backend `matmul` goes through `autotune.call.dispatcher`, as it
does under the simulator. `current()` picks the simulator when NUMBA_ENABLE_CUDASIM=1, else Numba
CUDA.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from functools import cache

from autotune.errors import NoGpuError

_BACKENDS = {"simulator": "autotune.backends.simulator", "numba-cuda": "autotune.backends.numba_cuda"}


@dataclass(frozen=True)
class Device:
    """A GPU as mmtune keys its records: rows measured on one model serve others by these fields."""

    name: str
    cc: str  # compute capability "9.0"; "" for the simulator
    sm_count: int  # streaming multiprocessors; 0 for the simulator
    driver: str = ""

    def as_dict(self) -> dict:
        return {"device": self.name, "cc": self.cc, "sm_count": self.sm_count, "driver": self.driver}


def simulated() -> bool:
    """NUMBA_ENABLE_CUDASIM as numba reads it (an integer, 0 by default), without importing numba
    when it is not loaded yet."""
    numba_config = sys.modules.get("numba.core.config")
    if numba_config is not None:
        return bool(numba_config.ENABLE_CUDASIM)
    try:
        return int(os.environ.get("NUMBA_ENABLE_CUDASIM", "0") or 0) != 0
    except ValueError:
        return False


def name() -> str:
    return "simulator" if simulated() else "numba-cuda"


@cache
def _load(backend_name: str):
    return importlib.import_module(_BACKENDS[backend_name]).BACKEND


def current():
    """The backend this process runs on (decided by NUMBA_ENABLE_CUDASIM before numba loads)."""
    return _load(name())


def require_gpu() -> None:
    """Measuring (tuning, looking up this GPU, calling matmul) needs a CUDA GPU or the simulator:
    NoGpuError in one line rather than the driver's traceback."""
    if simulated():
        return
    from numba import cuda

    if not cuda.is_available():
        lines = [line.strip() for line in str(cuda.cuda_error() or "").splitlines() if line.strip()]
        reason = lines[0].rstrip(".") if lines else "the CUDA driver sees no device"
        raise NoGpuError(f"no CUDA GPU here ({reason}); to run on the CPU under Numba's CUDA simulator, pass "
                         "--simulate (or set NUMBA_ENABLE_CUDASIM=1 before numba is imported)")


__all__ = ["Device", "current", "name", "require_gpu"]
