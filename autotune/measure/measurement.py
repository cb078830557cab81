"""Measurement: verify a kernel against a float64 reference, then time it with CUDA events.

Protocol (design.md): fresh random inputs (never zeros); the output is poisoned before the
verifying launch so an unwritten element fails; then >= 3 warm-up launches and the median of
>= 20 timed samples, each sample an event pair around enough launches to last ~0.2 ms, queued
behind a kernel that holds the stream until the host has enqueued them all: the samples are
device time even where launching from Python costs more than the kernel runs (small shapes; the
backend's `time`). GFLOPS = 2*M*N*K / seconds. Under the simulator the timings are host wall time
and meaningless.
"""

from __future__ import annotations

import math
import platform
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from autotune import backends
from autotune.measure.stored import launched
from autotune.store.paths import exclusive
from kernels import DTYPES, Kernel

#: relative Frobenius error allowed, in units of the dtype's machine epsilon times sqrt(K):
#: the error of K-term dot products grows like sqrt(K) for random data. float32 at K=1024 gets
#: 8 * 1.19e-7 * 32 = 3.1e-5; a TF32 product (~3e-4) or one wrong element fails.
ERROR_EPS_FACTOR = 8.0
#: integer inputs are drawn from [-INT_RANGE, INT_RANGE] so int32 sums cannot overflow for any K
#: we would time (|sum| <= K * 64), and int32 results must match exactly.
INT_RANGE = 8
INT_POISON = np.iinfo(np.int32).min
#: above this many multiply-adds the reference is computed for a random sample of rows of C
#: (every element is still checked for poison): a float64 4096^3 product on the host would
#: cost more than timing the kernel.
FULL_REFERENCE_MACS = 2**28
REFERENCE_ROWS = 256


def device_info() -> dict:
    """Name, compute capability, SM count and driver of the current device (autotune.backends)."""
    return backends.current().device().as_dict()


def versions() -> dict:
    from importlib.metadata import version

    return {"numba": version("numba"), "numba_cuda": version("numba-cuda"), "python": platform.python_version()}


def random_inputs(m: int, n: int, k: int, dtype: str, rng: np.random.Generator, layout: str = "NN"):
    """Fresh A (M x K) and B (K x N), stored as `layout` (kernels.LAYOUTS) says: a "T" A is the
    transposed view of a K x M array drawn C-contiguous (B: of an N x K one); `stored` gives
    what a kernel of that layout receives."""
    np_dtype = DTYPES[dtype][0]

    def draw(shape):
        if np_dtype.kind == "i":
            return rng.integers(-INT_RANGE, INT_RANGE + 1, shape).astype(np_dtype)
        return rng.standard_normal(shape, dtype=np_dtype)

    A = draw((k, m)).T if layout[0] == "T" else draw((m, k))
    B = draw((n, k)).T if layout[1] == "T" else draw((k, n))
    return A, B


def stored(A: np.ndarray, B: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """The C-contiguous arrays a kernel of `layout` receives for A and B (random_inputs' memory)."""
    return (A.T if layout[0] == "T" else A), (B.T if layout[1] == "T" else B)


def reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The exact-enough product: float64 for floats, int64 for integers."""
    wide = np.int64 if A.dtype.kind == "i" else np.float64
    return A.astype(wide) @ B.astype(wide)


def error_bound(dtype: str, k: int) -> float:
    np_dtype = DTYPES[dtype][0]
    if np_dtype.kind == "i":
        return 0.0
    return ERROR_EPS_FACTOR * float(np.finfo(np_dtype).eps) * math.sqrt(max(k, 1))


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref||_F / ||ref||_F; inf if anything is not finite. Exact 0/0 is 0."""
    diff = out.astype(ref.dtype) - ref
    if ref.dtype.kind == "i":
        wrong = np.count_nonzero(diff)
        return 0.0 if wrong == 0 else math.inf
    if not np.all(np.isfinite(out)):
        return math.inf
    scale = np.linalg.norm(ref)
    num = np.linalg.norm(diff)
    return float(num / scale) if scale else (0.0 if num == 0 else math.inf)


def poison_value(dtype: str):
    return np.nan if DTYPES[dtype][0].kind == "f" else INT_POISON


@dataclass(frozen=True)
class Verification:
    ok: bool
    error: float
    bound: float

    def describe(self) -> str:
        return f"relative error {self.error:.3g} {'<=' if self.ok else '>'} bound {self.bound:.3g}"


def verify(kernel: Kernel, m: int, n: int, k: int, rng: np.random.Generator) -> Verification:
    """Run `kernel` once on fresh random (M,K)@(K,N) inputs, stored as its layout says, into a
    poisoned output and compare with the reference (on REFERENCE_ROWS random rows when the
    product is large)."""
    backend = backends.current()
    A, B = random_inputs(m, n, k, kernel.dtype, rng, kernel.layout)
    a, b = stored(A, B, kernel.layout)
    out = run_poisoned(kernel, backend.to_device(a), backend.to_device(b))
    return compare(out, A, B, kernel.dtype, rng)


def run_poisoned(kernel: Kernel, dA, dB) -> np.ndarray:
    """One launch, on A and B as stored for the kernel's layout, into an output full of poison;
    what the kernel left there, on the host."""
    backend = backends.current()
    m = dA.shape[1] if kernel.layout[0] == "T" else dA.shape[0]
    n = dB.shape[0] if kernel.layout[1] == "T" else dB.shape[1]
    dC = backend.to_device(np.full((m, n), poison_value(kernel.dtype), dtype=dA.dtype))
    kernel(dA, dB, dC)
    backend.synchronize()
    return dC.copy_to_host()


def compare(out: np.ndarray, A: np.ndarray, B: np.ndarray, dtype: str, rng: np.random.Generator) -> Verification:
    """Host-side check of a poisoned launch's output against the reference."""
    m, k = A.shape
    bound = error_bound(dtype, k)
    if not all_written(out):  # INT_POISON is out of reach of sums of our int inputs
        return Verification(False, math.inf, bound)
    rows = slice(None)
    if m * B.shape[1] * k > FULL_REFERENCE_MACS and m > REFERENCE_ROWS:
        rows = np.sort(rng.choice(m, REFERENCE_ROWS, replace=False))
    error = relative_error(out[rows], reference(A[rows], B))
    return Verification(error <= bound, error, bound)


def all_written(out: np.ndarray) -> bool:
    return not ((out == INT_POISON) if out.dtype.kind == "i" else ~np.isfinite(out)).any()


@dataclass(frozen=True)
class Timing:
    """Per-launch times of one measurement, in milliseconds."""

    median_ms: float
    q25_ms: float
    q75_ms: float
    samples: int
    launches_per_sample: int

    @property
    def spread(self) -> float:
        """Interquartile range over the median: how much the clocks and neighbours moved us."""
        return (self.q75_ms - self.q25_ms) / self.median_ms if self.median_ms else 0.0

    def gflops(self, m: int, n: int, k: int) -> float:
        return 2.0 * m * n * k / (self.median_ms * 1e-3) / 1e9 if self.median_ms else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "spread": self.spread}


def time_launches(launch: Callable[[], None], warmup: int = 3, repeat: int = 20) -> Timing:
    """Time `launch` (which enqueues work on the default stream) by the protocol above."""
    samples, per_sample = backends.current().time(launch, warmup, repeat)
    return _timing(samples, per_sample)


def _timing(samples: list[float], per_sample: int) -> Timing:
    q25, median, q75 = np.percentile(samples, [25, 50, 75])
    return Timing(median_ms=float(median), q25_ms=float(q25), q75_ms=float(q75), samples=len(samples),
                  launches_per_sample=per_sample)


@dataclass(frozen=True)
class Measurement:
    verification: Verification
    timing: Timing | None  # None when verification failed
    gflops: float
    compile_s: float = 0.0


def measure(
    kernel: Kernel, shape: tuple[int, int, int], rng: np.random.Generator, warmup: int = 3, repeat: int = 20,
    lock: str | None = None,
) -> Measurement:
    """Compile, then verify and (only if correct) time `kernel` at `shape` (M, N, K) on fresh random
    inputs stored as its layout says. With `lock` (a file path) only the GPU part holds that lock:
    processes sharing a GPU compile, draw inputs and compare with the reference in parallel but
    never time at once.
    On a GPU the kernel measured is its build from the kernel store (autotune.measure.stored), the
    binary `matmul` launches, and `compile_s` of a build stored before is the time to load it.
    The timing of a kernel that turns out wrong is discarded."""
    m, n, k = shape
    backend = backends.current()
    started = time.perf_counter()
    kernel = launched(kernel)
    kernel.compile()
    compile_s = time.perf_counter() - started
    backend.prepare_timing()  # compiles what timing needs once per process, not while holding the lock
    A, B = random_inputs(m, n, k, kernel.dtype, rng, kernel.layout)
    timing = None
    with exclusive(lock):
        dA, dB = (backend.to_device(x) for x in stored(A, B, kernel.layout))
        out = run_poisoned(kernel, dA, dB)
        if all_written(out):
            dC = backend.empty((m, n), A.dtype)
            timing = time_launches(lambda: kernel.launch(dA, dB, dC), warmup, repeat)
    verification = compare(out, A, B, kernel.dtype, rng)
    if not verification.ok:
        return Measurement(verification, None, 0.0, compile_s)
    return Measurement(verification, timing, timing.gflops(m, n, k), compile_s)


def cublas_matmul() -> Callable | None:
    """cuBLAS as `f(dA, dB, dC)` on the backend's device arrays, or None where there is none."""
    return backends.current().cublas()


def cublas_gflops(m: int, n: int, k: int, dtype: str, rng: np.random.Generator) -> float | None:
    """cuBLAS's GFLOPS at (M, N, K) on fresh inputs, timed as `measure` times a kernel (studies
    compare the two in one process); None where there is no cuBLAS."""
    call = cublas_matmul()
    if call is None:
        return None
    backend = backends.current()
    A, B = random_inputs(m, n, k, dtype, rng)
    dA, dB, dC = backend.to_device(A), backend.to_device(B), backend.empty((m, n), A.dtype)
    return time_launches(lambda: call(dA, dB, dC)).gflops(m, n, k)
