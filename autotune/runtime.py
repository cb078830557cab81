"""matmul(A, B, out=None) with the tuned kernel for the shape, and lookup(): which one and why.

Where a config comes from, in order:
  exact    the cache holds this (device, dtype, M, N, K)
  nearest  the cache's tuned shape on this device and dtype closest by autotune.cache.shape_distance
           (log2 scale; doubling one dimension = 1), if within NEAREST_MAX_DISTANCE
  shipped  the same two steps over the records committed in studies/*/records.json for this GPU
  default  the register family's DEFAULT config
Lookups and built kernels are memoized per process; call `clear()` after tuning in-process.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from functools import cache
from typing import Callable

import numpy as np
from numba import cuda

import kernels
from autotune.cache import Cache, CacheError, nearest_rows, shipped_rows
from autotune.measure import device_info
from autotune.operands import check_elements, check_shapes
from autotune.space import DEFAULT_FAMILY, DeviceLimits, default_config, infeasibility
from kernels import DTYPES, Kernel, OperandError, check_operands

is_cuda_ndarray = cuda.devicearray.is_cuda_ndarray  # the simulator's, under the simulator

NEAREST_MAX_DISTANCE = 3.0  # e.g. 8x along one dimension, or 2x along all three


@dataclass(frozen=True)
class Choice:
    family: str
    config: dict
    source: str  # exact | nearest | shipped | default
    device: str
    tuned_shape: tuple[int, int, int] | None = None  # the shape the config was tuned for
    distance: float | None = None  # shape_distance to tuned_shape
    gflops: float | None = None  # as measured when tuned


@dataclass(frozen=True)
class _Plan:
    """What a device-array call of a given (A.shape, B.shape, dtypes) needs, validated once."""

    shape: tuple[int, int]  # of C
    dtype: np.dtype
    launch: Callable  # the configured kernel: launch(A, B, C) on the default stream
    kernel: Kernel


_choices: dict[tuple, Choice] = {}
_kernels: dict[tuple, Kernel] = {}
_plans: dict[tuple, _Plan] = {}
_shipped: dict[tuple, list[dict]] = {}  # studies/*/records.json rows per (device, dtype), read once


def clear() -> None:
    """Forget memoized lookups (e.g. after tuning in this process) and built kernels."""
    _choices.clear()
    _kernels.clear()
    _plans.clear()
    _shipped.clear()
    _device.cache_clear()


def lookup(m: int, n: int, k: int, dtype: str = "float32") -> Choice:
    """The config `matmul` uses for an (M x K) @ (K x N) product of `dtype`, and where it came from."""
    key = (m, n, k, dtype)
    choice = _choices.get(key)
    if choice is None:
        choice = _choices[key] = _find(m, n, k, dtype)
    return choice


def _find(m: int, n: int, k: int, dtype: str) -> Choice:
    if dtype not in DTYPES:
        raise OperandError(f"unsupported dtype {dtype}; supported: {', '.join(DTYPES)}")
    device = _device()
    if (device, dtype) not in _shipped:
        _shipped[device, dtype] = shipped_rows(device, dtype)
    for source, rows in (("cache", _cached_rows(device, dtype)), ("shipped", _shipped[device, dtype])):
        usable = [r for r in rows if _usable(r, dtype)]
        for distance, row in nearest_rows(usable, (m, n, k), 1):
            if distance <= NEAREST_MAX_DISTANCE:
                name = source if source == "shipped" else ("exact" if distance == 0 else "nearest")
                return Choice(
                    row["family"], row["params"], name, device,
                    (row["m"], row["n"], row["k"]), distance, row["gflops"],
                )
    return Choice(DEFAULT_FAMILY, default_config(DEFAULT_FAMILY), "default", device)


@cache
def _device() -> str:
    return device_info()["device"]


def _cached_rows(device: str, dtype: str) -> list[dict]:
    try:
        cache = Cache()
    except CacheError as error:
        warnings.warn(f"mmtune: ignoring the cache: {error}", stacklevel=3)
        return []
    try:
        return cache.rows(device, dtype)
    finally:
        cache.close()


def _usable(row: dict, dtype: str) -> bool:
    """A row whose family or params no longer fit the code (after an upgrade) is skipped."""
    try:
        reason = infeasibility(row["family"], row["params"], dtype, DeviceLimits())
    except ValueError as error:  # unknown family
        reason = str(error)
    if reason:
        warnings.warn(f"mmtune: skipping cached {row['family']} config for {row['m']}x{row['n']}x{row['k']}: {reason}")
    return reason is None


def kernel_for(choice: Choice, dtype: str) -> Kernel:
    key = (choice.family, json.dumps(choice.config, sort_keys=True), dtype)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = _kernels[key] = kernels.build(choice.family, choice.config, dtype)
    return kernel


def matmul(A, B, out=None, stream=None):
    """C = A @ B through Numba's dispatcher (autotune.calls.matmul sends the simulator, NumPy
    operands and MMTUNE_LAUNCH=numba here). A and B: NumPy arrays (copied to the GPU and back),
    or device arrays (Numba, or anything with __cuda_array_interface__ such as CuPy and PyTorch),
    used in place, launched on `stream` (a raw handle or a Numba stream; default: the default
    stream). Returns the same kind as A; `out`, if given, receives C and is returned."""
    if isinstance(A, np.ndarray) or isinstance(B, np.ndarray):
        if not (isinstance(A, np.ndarray) and isinstance(B, np.ndarray)):
            raise OperandError("A and B must both be NumPy arrays or both be device arrays")
        return _host_matmul(A, B, out)
    # The hot path: a repeated shape costs two dict lookups and a few attribute reads.
    dA = A if is_cuda_ndarray(A) else _device_view(A, "A")
    dB = B if is_cuda_ndarray(B) else _device_view(B, "B")
    key = (dA.shape, dB.shape, dA.dtype, dB.dtype)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = _plan(dA, dB)
    if out is None:
        out = _empty_like(A, plan.shape, plan.dtype)
    dC = out if is_cuda_ndarray(out) else _device_view(out, "out")
    if dC.shape != plan.shape or dC.dtype != plan.dtype:
        raise OperandError(f"out must be a {plan.shape[0]}x{plan.shape[1]} device array of {plan.dtype}")
    if not (dA.is_c_contiguous() and dB.is_c_contiguous() and dC.is_c_contiguous()):
        check_operands(dA, dB, dC, plan.dtype.name)  # names the culprit
    if stream:
        plan.kernel.launcher(*plan.shape, _numba_stream(stream))(dA, dB, dC)
    else:
        plan.launch(dA, dB, dC)
    return out


def _numba_stream(stream):
    return cuda.external_stream(stream) if isinstance(stream, int) else stream


def _plan(dA, dB) -> _Plan:
    m, n, k, dtype = check_shapes(dA, dB)
    check_elements(m, n, k)
    kernel = kernel_for(lookup(m, n, k, dtype), dtype)
    return _Plan((m, n), np.dtype(dtype), kernel.launcher(m, n), kernel)


def _host_matmul(A: np.ndarray, B: np.ndarray, out):
    m, n, k, dtype = check_shapes(A, B)
    check_elements(m, n, k)
    if out is not None and (not isinstance(out, np.ndarray) or out.shape != (m, n) or out.dtype != A.dtype):
        raise OperandError(f"out must be a {m}x{n} NumPy array of {dtype}")
    require_device_memory((m * k + k * n + m * n) * A.dtype.itemsize)
    dC = cuda.device_array((m, n), A.dtype)
    kernel_for(lookup(m, n, k, dtype), dtype)(
        cuda.to_device(np.ascontiguousarray(A)), cuda.to_device(np.ascontiguousarray(B)), dC
    )
    if out is None:
        return dC.copy_to_host()
    if out.flags.c_contiguous:
        return dC.copy_to_host(out)
    out[...] = dC.copy_to_host()
    return out


def _device_view(x, name: str):
    if hasattr(x, "__cuda_array_interface__") and hasattr(cuda, "as_cuda_array"):  # not in the simulator
        return cuda.as_cuda_array(x)
    raise OperandError(f"{name} is a {type(x).__name__}: expected a NumPy array or a CUDA device array")


def free_device_memory() -> float:
    return cuda.current_context().get_memory_info().free


def require_device_memory(nbytes: int) -> None:
    """Refuse, with a clear error, a product that cannot fit in the GPU's free memory."""
    free = free_device_memory()
    if nbytes > free:
        raise OperandError(f"the product needs {nbytes / 2**30:.2f} GiB on the GPU; {free / 2**30:.2f} GiB is free")


def _empty_like(A, shape, dtype):
    """A new device array of the same kind as A (CuPy, PyTorch, else Numba)."""
    require_device_memory(shape[0] * shape[1] * np.dtype(dtype).itemsize)
    module = type(A).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        return cupy.empty(shape, dtype=dtype)
    if module == "torch":
        import torch

        return torch.empty(shape, dtype=A.dtype, device=A.device)
    return cuda.device_array(shape, dtype)
